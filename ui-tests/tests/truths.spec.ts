/**
 * What the log panel says during an outage, where its status lines sit, and how it shows a
 * stage its job resumed after a server restart (issue 13, "small UI truths").
 */
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import {
  countLines,
  diaryLines,
  expectEveryEpochOnce,
  expectStatus,
  lastLogPanel,
  logText,
  sendFromForm
} from './helpers';

const PROJECT = 'digits';
const STREAM = /\/j2c\/api\/jobs\/[^/]+\/stream/;

interface IOutageWindow {
  j2cDown: boolean;
  j2cSockets: WebSocket[];
}

/**
 * Make the job streams' server unreachable at will: while `j2cDown` is set, every new stream
 * socket goes to a closed port (the browser's own "connection refused"), as when the server is
 * stopped. Runs before JupyterLab loads, which keeps a reference to `WebSocket`.
 */
async function installOutageSwitch(page: IJupyterLabPageFixture) {
  await page.addInitScript((pattern: string) => {
    const scope = window as unknown as IOutageWindow & typeof globalThis;
    const Native = scope.WebSocket;
    const stream = new RegExp(pattern);
    scope.j2cDown = false;
    scope.j2cSockets = [];
    class Switchable extends Native {
      constructor(url: string | URL, protocols?: string | string[]) {
        const isStream = stream.test(String(url));
        super(isStream && scope.j2cDown ? 'ws://127.0.0.1:9/' : url, protocols);
        if (isStream) {
          scope.j2cSockets.push(this);
        }
      }
    }
    scope.WebSocket = Switchable;
  }, STREAM.source);
}

test.describe('small UI truths', () => {
  test('the reconnect countdown counts down, backs off and reconnects', async ({
    page
  }) => {
    const EPOCHS = 120;
    let down = false;
    await installOutageSwitch(page);
    // While "down", the job's record cannot be fetched either (the stream checks it).
    await page.route(/\/j2c\/api\/jobs\/[^/?]+(\?.*)?$/, route =>
      down ? route.abort('connectionrefused') : route.continue()
    );
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: `--epochs ${EPOCHS} --sleep 0.1`
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expect
      .poll(() => logText(page, jobId), { timeout: 60000 })
      .toContain(`epoch 3/${EPOCHS}`);

    down = true;
    await page.evaluate(() => {
      const scope = window as unknown as IOutageWindow;
      scope.j2cDown = true;
      scope.j2cSockets.forEach(socket => socket.close());
    });
    const connection = panel.locator('.j2c-LogHeader-connection');
    await expect(connection).toContainText('connection lost');

    // Read the header as a user would, four times a second, for nine seconds.
    const seconds: number[] = [];
    const texts = new Set<string>();
    for (let i = 0; i < 36; i++) {
      const text = (await connection.textContent()) ?? '';
      texts.add(text);
      const match = /reconnecting in (\d+) s/.exec(text);
      if (match) {
        seconds.push(Number(match[1]));
      }
      await page.waitForTimeout(250);
    }
    // It counts down: some reading is one second less than the one before it...
    const steps = seconds.filter(
      (value, i) => i > 0 && value === seconds[i - 1] - 1
    );
    expect(steps.length, `readings: ${seconds.join(' ')}`).toBeGreaterThan(2);
    // ...and the waits grow (250 ms doubled each attempt: 8 s by now), never above 10 s.
    expect(Math.max(...seconds)).toBeGreaterThanOrEqual(4);
    expect(Math.max(...seconds)).toBeLessThanOrEqual(10);
    expect([...texts].some(text => /\d+ attempts failed/.test(text))).toBe(
      true
    );

    // The server is back: "Retry now" reconnects at once and the log goes on, complete.
    down = false;
    await page.evaluate(() => {
      (window as unknown as IOutageWindow).j2cDown = false;
    });
    await panel.getByRole('button', { name: 'Retry now' }).click();
    await expect(connection).toHaveCount(0, { timeout: 10000 });
    await expectStatus(panel, 'succeeded');
    const text = await logText(page, jobId);
    expectEveryEpochOnce(text, EPOCHS);
  });

  test("the output holds the job's own lines, the same live and replayed; j2c's go to the diary", async ({
    page
  }) => {
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: '--epochs 3'
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    const live = await logText(page, jobId);
    const liveDiary = await diaryLines(panel, 'running');

    // Opening the finished job's log again replays it from its first event.
    await page.reload({ waitForIsReady: false });
    const restored = page.locator(`#j2c-log-${jobId}`);
    await expect(restored).toBeVisible({ timeout: 30000 });
    await expectStatus(restored, 'succeeded');
    await expect
      .poll(() => logText(page, jobId), { timeout: 10000 })
      .toContain('final accuracy');
    const replayed = await logText(page, jobId);
    expect(replayed).toBe(live);
    expect(await diaryLines(restored, 'running')).toEqual(liveDiary);

    // The job's lines only: the first is its own, no status line or runner line among them.
    const lines = live.split('\n');
    expect(lines[0]).toMatch(/^training on /);
    expect(lines.filter(line => /^(\[j2c\]|j2c:) /.test(line))).toEqual([]);
    expect(lines.filter(line => /^epoch \d\/3 /.test(line))).toHaveLength(3);
    // "running" is said once, in its step's diary, with the runner's lines.
    expect(countLines(liveDiary.join('\n'), /^running$/)).toBe(1);
    expect(liveDiary.some(line => line.startsWith('manifest: '))).toBe(true);
  });

  test('a stage resumed after a server restart shows as done, not reused', async ({
    page
  }) => {
    // Between the page and the server: after the job was submitted, say what a restarted
    // server says when it picks the job up again (and number the rest after it).
    let injected = false;
    await page.routeWebSocket(STREAM, ws => {
      const server = ws.connectToServer();
      let shift = 0;
      server.onMessage(message => {
        const event = JSON.parse(String(message));
        event.seq += shift;
        ws.send(JSON.stringify(event));
        if (event.kind === 'status' && event.status === 'submitted') {
          const handle = /as (\S+)/.exec(event.text ?? '')?.[1] ?? '';
          shift += 1;
          injected = true;
          ws.send(
            JSON.stringify({
              job_id: event.job_id,
              seq: event.seq + 1,
              time: event.time,
              kind: 'stage',
              stage: 'submit',
              state: 'reused',
              text: `submit resumed after a server restart: already submitted as ${handle}`
            })
          );
        }
      });
    });
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: '--epochs 2'
    });
    const { panel } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    expect(injected).toBe(true);
    const submit = panel.locator('[data-step="submit"]');
    await expect(submit).toHaveAttribute('data-state', 'finished');
    await expect(submit).toHaveAttribute('data-resumed', 'true');
    await expect(submit).toHaveAttribute('title', /submitted to local as/);
    await expect(submit.locator('.j2c-Step-detail')).toHaveCount(0);
  });
});

test.describe('edit then send', () => {
  const TRAIN = `${PROJECT}/train.py`;
  // The served project is a copy of the checkout's example (jupyter_server_test_config.py).
  const original = fs.readFileSync(
    path.resolve(__dirname, '..', '..', 'examples', 'digits', 'train.py'),
    'utf-8'
  );

  test.afterEach(async ({ page }) => {
    await page.contents.uploadContent(original, 'text', TRAIN);
  });

  test('sending again says whether anything changed and runs the edit', async ({
    page
  }) => {
    const toast = (text: string | RegExp) =>
      page.locator('.Toastify__toast').filter({ hasText: text });
    // Settings no other test sends, so the first job is this test's own.
    const args = `--epochs 2 --seed ${Date.now() % 100000}`;
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: args
    });
    const first = await lastLogPanel(page);
    await expect(toast(/sending a new job/)).toBeVisible();
    await expectStatus(first.panel, 'succeeded');

    // Nothing changed: the same job, and the notification says so.
    await sendFromForm(page, { Arguments: args });
    await expect(
      toast(`nothing changed since job ${first.jobId} (succeeded): showing it`)
    ).toBeVisible();
    expect((await lastLogPanel(page)).jobId).toBe(first.jobId);
    await expect(page.locator('.j2c-LogWidget')).toHaveCount(1);

    // One line edited: a new job that runs the edit, and the notification names the file.
    await page.contents.uploadContent(
      original.replace('print(f"training on', 'print(f"edited: training on'),
      'text',
      TRAIN
    );
    await sendFromForm(page, { Arguments: args });
    await expect(
      toast(
        `1 file changed since job ${first.jobId}: sending a new job (train.py changed)`
      )
    ).toBeVisible();
    await expect(page.locator('.j2c-LogWidget')).toHaveCount(2);
    const second = await lastLogPanel(page);
    expect(second.jobId).not.toBe(first.jobId);
    await expectStatus(second.panel, 'succeeded');
    expect(await logText(page, second.jobId)).toContain('edited: training on');
    // The venv did not change: its layer is reused.
    await expect(second.panel.locator('[data-step="upload"]')).toHaveAttribute(
      'data-state',
      /reused|finished/
    );
  });
});
