/**
 * The experiment first, in the log panel (issue 46): the output holds the job's own lines
 * (its stderr marked, a line of its own that starts with "j2c:" included) and j2c's lines fold
 * into the timeline, one line per step; a failed job says why at the top, with the line it
 * came from; the live region reads the job's lines, and j2c's only when it fails; the
 * downloaded log holds j2c's diary too.
 */
import AxeBuilder from '@axe-core/playwright';
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';

import {
  expectStatus,
  lastLogPanel,
  logText,
  openComputePanel
} from './helpers';

const PROJECT = 'log-panel-job';

test.use({ viewport: { width: 1440, height: 900 } });

/** A script of the test's own, sent from the form (no venv: the base Python runs it). */
async function sendScript(
  page: IJupyterLabPageFixture,
  name: string,
  source: string
): Promise<void> {
  await page.contents.uploadContent(source, 'text', `${PROJECT}/${name}`);
  const panel = await openComputePanel(page);
  for (const [label, value] of Object.entries({
    'Project folder': PROJECT,
    'Entry point': name,
    'Virtual environment': '',
    Arguments: ''
  })) {
    await panel.getByLabel(label, { exact: true }).fill(value);
  }
  await panel.getByRole('button', { name: 'Send to Compute' }).click();
}

/** The output's rows as the terminal holds them (marks included, unlike Copy). */
async function rawRows(
  page: IJupyterLabPageFixture,
  jobId: string
): Promise<string[]> {
  return page.evaluate(id => {
    interface IBuffer {
      length: number;
      getLine(
        i: number
      ): { translateToString(trim: boolean): string } | undefined;
    }
    const app = (
      window as unknown as {
        jupyterapp: {
          shell: {
            widgets(area: string): Iterable<{
              id: string;
              content: { view: { terminal: { buffer: { active: IBuffer } } } };
            }>;
          };
        };
      }
    ).jupyterapp;
    for (const widget of app.shell.widgets('main')) {
      if (widget.id === `j2c-log-${id}`) {
        const buffer = widget.content.view.terminal.buffer.active;
        const rows: string[] = [];
        for (let i = 0; i < buffer.length; i++) {
          rows.push(buffer.getLine(i)?.translateToString(true) ?? '');
        }
        return rows.filter(row => row);
      }
    }
    return [];
  }, jobId);
}

/**
 * Say of the stream's lines holding `marker` that the job wrote them to stderr, as an engine
 * that tells the two apart does (container log frames): the local scheduler's log file merges
 * them, so its lines carry no stream.
 */
async function asStderr(
  page: IJupyterLabPageFixture,
  marker: string
): Promise<void> {
  await page.routeWebSocket(/\/j2c\/api\/jobs\/[^/]+\/stream/, ws => {
    const server = ws.connectToServer();
    server.onMessage(message => {
      const event = JSON.parse(String(message));
      if (event.kind === 'log' && String(event.text).includes(marker)) {
        event.stream = 'stderr';
      }
      ws.send(JSON.stringify(event));
    });
  });
}

const SPEAKS = `import sys
print("first line of the job")
print("j2c: a line of the job's own that looks like j2c's")
print("a warning of the job", file=sys.stderr, flush=True)
print("last line of the job")
`;

test("the output holds the job's lines, j2c's fold into the timeline", async ({
  page
}) => {
  await asStderr(page, 'a warning of the job');
  await page.goto();
  await sendScript(page, 'speaks.py', SPEAKS);
  const { panel, jobId } = await lastLogPanel(page);
  await expectStatus(panel, 'succeeded');
  await expect
    .poll(() => logText(page, jobId), { timeout: 10000 })
    .toContain('last line of the job');
  // The job's four lines, in order, and nothing else: no status line, no j2c-unpack line.
  expect((await logText(page, jobId)).split('\n')).toEqual([
    'first line of the job',
    "j2c: a line of the job's own that looks like j2c's",
    'a warning of the job',
    'last line of the job'
  ]);
  // Its stderr line carries the mark (a bar, red), the others do not.
  const rows = await rawRows(page, jobId);
  expect(rows.filter(row => row.startsWith('▍ '))).toEqual([
    '▍ a warning of the job'
  ]);

  // j2c's lines: one toggle, then one line per step, each unfolding to its lines.
  const toggle = panel.locator('[data-j2c="diary-toggle"]');
  await expect(toggle).toHaveText(/^j2c: \d+ lines$/);
  const count = Number(
    /(\d+) lines/.exec((await toggle.textContent()) ?? '')?.[1]
  );
  expect(count).toBeGreaterThan(10);
  await expect(toggle).toHaveAttribute('aria-expanded', 'false');
  await expect(panel.locator('[data-j2c="diary"]')).toHaveCount(0);
  await toggle.click();
  await expect(toggle).toHaveAttribute('aria-expanded', 'true');
  const diary = panel.locator('[data-j2c="diary"]');
  const steps = diary.locator('.j2c-Diary-step');
  expect(
    await steps.evaluateAll(items => items.map(item => item.dataset.step))
  ).toEqual(['scan', 'pack', 'upload', 'submit', 'running', 'results']);
  const running = diary.locator('[data-step="running"]');
  await expect(running.locator('.j2c-Diary-lines')).toHaveCount(0);
  await running.getByRole('button').click();
  const lines = running.locator('.j2c-Diary-lines li');
  await expect(lines.filter({ hasText: /manifest: / })).toHaveCount(1);
  // The job's own "j2c:" line is not j2c's.
  await expect(lines.filter({ hasText: 'looks like' })).toHaveCount(0);

  // The downloaded log has everything: the job's lines and j2c's, marked.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    panel.getByRole('button', { name: 'Download' }).click()
  ]);
  const text = fs.readFileSync(await download.path(), 'utf-8');
  const downloaded = text.split('\n');
  expect(downloaded).toContain(
    "j2c: a line of the job's own that looks like j2c's"
  );
  expect(downloaded).toContain('a warning of the job');
  expect(downloaded.some(line => /^\[j2c\] .*manifest: /.test(line))).toBe(
    true
  );
  expect(downloaded).toContain('[j2c] succeeded: exit code 0');
});

const FAILS = `import sys
print("loading the data")
raise ValueError("learning rate must be positive, got -0.1")
`;

test('a failed job says why at the top, with the line it came from', async ({
  page
}) => {
  await page.goto();
  await sendScript(page, 'fails.py', FAILS);
  const { panel, jobId } = await lastLogPanel(page);
  await expectStatus(panel, 'failed');
  const failure = panel.locator('[data-j2c="failure"]');
  await expect(failure).toBeVisible();
  await expect(panel.locator('[data-j2c="failure-reason"]')).toContainText(
    'Failed:'
  );
  await expect(panel.locator('[data-j2c="failure-line"]')).toHaveText(
    'ValueError: learning rate must be positive, got -0.1'
  );
  // At the top: above the job's name and status, and the timeline.
  const [banner, status] = [
    await failure.boundingBox(),
    await panel.locator('[data-j2c="status"]').boundingBox()
  ];
  expect(banner && status && banner.y + banner.height <= status.y).toBe(true);
  // The output has the job's lines and its traceback.
  const text = await logText(page, jobId);
  expect(text).toContain('loading the data');
  expect(text).toContain(
    'ValueError: learning rate must be positive, got -0.1'
  );
  // j2c's diary is unfolded where it went wrong.
  await expect(panel.locator('[data-j2c="diary"]')).toBeVisible();
  await expect(
    panel.locator('[data-j2c="diary"] [data-step="running"] .j2c-Diary-lines')
  ).toBeVisible();
  // The live region says why, once, with the line.
  const region = panel.locator('[role="log"][aria-live="polite"]');
  const said = region.locator('[data-kind="failure"]');
  await expect(said).toHaveCount(1);
  await expect(said).toContainText(
    'From: ValueError: learning rate must be positive, got -0.1'
  );
  // The banner and the unfolded diary: axe finds nothing serious or critical.
  const scan = await new AxeBuilder({ page })
    .include('.j2c-LogWidget')
    .analyze();
  const serious = scan.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id}: ${v.nodes.map(n => n.target.join(' ')).join(', ')}`);
  expect(serious).toEqual([]);
});

test("the live region reads the job's lines, not j2c's", async ({ page }) => {
  await page.goto();
  await sendScript(page, 'speaks.py', SPEAKS);
  const { panel } = await lastLogPanel(page);
  await expectStatus(panel, 'succeeded');
  const region = panel.locator('[role="log"][aria-live="polite"]');
  await expect(region.locator('[data-kind="end"]')).toHaveCount(1);
  expect(await region.locator('[data-kind="line"]').allTextContents()).toEqual([
    'first line of the job',
    "j2c: a line of the job's own that looks like j2c's",
    'a warning of the job',
    'last line of the job'
  ]);
  await expect(region.locator('[data-kind="status"]').first()).toBeAttached();
  await expect(region.locator('[data-kind="failure"]')).toHaveCount(0);
});
