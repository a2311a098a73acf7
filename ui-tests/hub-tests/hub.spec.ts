/**
 * j2c behind a real JupyterHub (scripts/hub-up.sh, base URL /hub-prefix/): alice sends from
 * the editor's toolbar and follows the log through the hub's proxy; bob, logged in too, sees
 * and reaches none of it; alice's server stopped and started again from the hub mid-job, the
 * open log panel catches up with every line once.
 */
import {
  APIRequestContext,
  Browser,
  Page,
  expect,
  request,
  test
} from '@playwright/test';
import * as fs from 'fs';

import { countLines, expectEveryEpochOnce } from '../tests/helpers';

const HUB = '/hub-prefix';
const PASSWORD = process.env.J2C_HUB_PASSWORD ?? '';
const ADMIN_TOKEN = process.env.J2C_HUB_ADMIN_TOKEN ?? '';
const PROJECT = 'digits';

/** The frames one page received on its j2c event streams, with when they came. */
interface IFrame {
  url: string;
  at: number;
  text: string;
}

/** The page objects logText reads (the servers expose JupyterLab to the page). */
interface ILogWidget {
  id: string;
  content: { view: { text(): string } };
}
interface IPageWindow {
  jupyterapp: { shell: { widgets(area: string): Iterable<ILogWidget> } };
}

/** Log in on the hub's form; the hub spawns the user's lab and sends the browser there. */
async function logIn(browser: Browser, user: string): Promise<Page> {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${HUB}/hub/login`);
  await page.locator('#username_input').fill(user);
  await page.locator('#password_input').fill(PASSWORD);
  await page.locator('#login_submit').click();
  await page.waitForURL(new RegExp(`${HUB}/user/${user}/lab`), {
    timeout: 180000
  });
  await expect(page.getByRole('tab', { name: 'Compute' })).toBeVisible({
    timeout: 120000
  });
  return page;
}

function recordStreams(page: Page): IFrame[] {
  const frames: IFrame[] = [];
  page.on('websocket', ws => {
    if (!/\/j2c\/api\/jobs\/[^/]+\/stream/.test(ws.url())) {
      return;
    }
    ws.on('framereceived', frame => {
      frames.push({
        url: ws.url(),
        at: Date.now(),
        text: String(frame.payload)
      });
    });
  });
  return frames;
}

async function openComputePanel(page: Page) {
  const panel = page.locator('#j2c-compute-sidebar');
  if (!(await panel.isVisible())) {
    await page.getByRole('tab', { name: 'Compute' }).click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

async function lastLogPanel(page: Page) {
  const panel = page.locator('.j2c-LogWidget').last();
  await expect(panel).toBeVisible({ timeout: 60000 });
  const id = (await panel.getAttribute('id')) ?? '';
  return { panel, jobId: id.replace(/^j2c-log-/, '') };
}

async function logText(page: Page, jobId: string): Promise<string> {
  return page.evaluate(id => {
    const app = (window as unknown as IPageWindow).jupyterapp;
    for (const widget of app.shell.widgets('main')) {
      if (widget.id === `j2c-log-${id}`) {
        return widget.content.view.text();
      }
    }
    return '';
  }, jobId);
}

async function expectStatus(
  panel: ReturnType<Page['locator']>,
  status: string,
  timeout = 120000
) {
  await expect(panel.locator('[data-j2c="status"]')).toHaveText(status, {
    timeout
  });
}

/** The hub's REST API as the tests' service (admin:servers). */
async function hubAdmin(baseURL: string): Promise<APIRequestContext> {
  return request.newContext({
    baseURL,
    extraHTTPHeaders: { Authorization: `token ${ADMIN_TOKEN}` }
  });
}

async function serverReady(admin: APIRequestContext, user: string) {
  const info = await (await admin.get(`${HUB}/hub/api/users/${user}`)).json();
  const server = info.servers?.[''];
  return server ? (server.ready ? 'ready' : 'pending') : 'stopped';
}

test.describe.serial('j2c behind JupyterHub', () => {
  let alice: Page;
  let aliceFrames: IFrame[];
  let aliceJob = '';

  test.beforeAll(async ({ browser }) => {
    alice = await logIn(browser, 'alice');
    aliceFrames = recordStreams(alice);
  });

  test('alice sends from the editor toolbar, the log streams through the hub, the artifact downloads', async () => {
    await alice.goto(`${HUB}/user/alice/lab/tree/${PROJECT}/train.py`);
    const send = alice.getByRole('main').locator('.j2c-SendButton').first();
    await expect(send).toBeVisible({ timeout: 60000 });
    await send.click();

    const { panel, jobId } = await lastLogPanel(alice);
    aliceJob = jobId;
    await expectStatus(panel, 'succeeded');
    const text = await logText(alice, jobId);
    expectEveryEpochOnce(text, 5);
    expect(text).toContain('final accuracy');

    // The lines came over the websocket the hub's proxy carries for alice's server.
    const ours = aliceFrames.filter(f => f.url.includes(`/stream`));
    expect(ours.length).toBeGreaterThan(0);
    for (const frame of ours) {
      expect(frame.url).toMatch(
        new RegExp(`^ws://127\\.0\\.0\\.1:\\d+${HUB}/user/alice/j2c/api/jobs/`)
      );
    }
    expect(ours.some(f => /epoch 1\/5 /.test(f.text))).toBe(true);

    const link = panel.getByRole('link', { name: 'metrics.json' });
    const [download] = await Promise.all([
      alice.waitForEvent('download'),
      link.click()
    ]);
    expect(download.suggestedFilename()).toBe('metrics.json');
    const metrics = JSON.parse(fs.readFileSync(await download.path(), 'utf-8'));
    expect(metrics.history).toHaveLength(5);
  });

  test("bob sees none of alice's jobs and is refused on her routes and her websocket", async ({
    browser,
    baseURL
  }) => {
    expect(aliceJob).not.toBe('');
    const bob = await logIn(browser, 'bob');
    // As bob's lab would ask: from his page, with his _xsrf token. The proxy answers 503 now
    // and then when it reuses a connection the server closed after an error; a browser's
    // request is sent again then, and so is this one (the answer checked is the server's).
    const ask = (route: string, method = 'GET') =>
      bob.evaluate(
        async ([url, method]) => {
          const xsrf =
            /(?:^|;\s*)_xsrf=([^;]*)/.exec(document.cookie)?.[1] ?? '';
          let res: Response | undefined;
          for (let attempt = 0; attempt < 3; attempt++) {
            res = await fetch(url, {
              method,
              credentials: 'same-origin',
              headers: { 'X-XSRFToken': xsrf }
            });
            const page = res.headers.get('content-type')?.includes('text/html');
            if (!(res.status === 503 && page)) {
              break; // j2c's own answers are JSON; the proxy's error page is HTML
            }
          }
          return { status: res!.status, body: await res!.text() };
        },
        [route, method]
      );
    // His own server answers him: no jobs, and none in his Compute panel.
    const own = await ask(`${HUB}/user/bob/j2c/api/jobs`);
    expect(own.status).toBe(200);
    expect(JSON.parse(own.body)).toEqual([]);
    const panel = await openComputePanel(bob);
    await expect(panel.locator('.j2c-Job')).toHaveCount(0);

    // Every route of alice's server: 403, never a 200 with alice's data.
    const routes: [string, string][] = [
      ['GET', 'jobs'],
      ['GET', `jobs/${aliceJob}`],
      ['GET', `jobs/${aliceJob}/events?after=0&limit=100`],
      ['GET', `jobs/${aliceJob}/artifacts/metrics.json`],
      ['POST', `jobs/${aliceJob}/cancel`],
      ['DELETE', `jobs/${aliceJob}`],
      ['GET', 'config']
    ];
    for (const [method, route] of routes) {
      const answer = await ask(`${HUB}/user/alice/j2c/api/${route}`, method);
      expect(answer.status, `${method} ${route}`).toBe(403);
      expect(answer.body).not.toContain(aliceJob);
    }
    // Going there as a browser does. An API route answers 403 itself (no login redirect);
    // a page of alice's server sends bob through the hub's OAuth, and the hub refuses him.
    const api = await bob.goto(`${HUB}/user/alice/j2c/api/jobs`);
    expect(api?.status()).toBe(403);
    expect(await bob.content()).not.toContain(aliceJob);
    const lab = await bob.goto(`${HUB}/user/alice/lab`);
    expect(lab?.status()).toBe(403);
    expect(new URL(bob.url()).pathname).toMatch(new RegExp(`^${HUB}/hub/`));
    await bob.goto(`${HUB}/user/bob/lab`);

    // The websocket: refused at the upgrade, no message ever reaches bob's page.
    const ws = await bob.evaluate(
      async url => {
        return new Promise<{ opened: boolean; messages: number }>(resolve => {
          const socket = new WebSocket(url);
          let opened = false;
          let messages = 0;
          socket.onopen = () => {
            opened = true;
          };
          socket.onmessage = () => {
            messages += 1;
          };
          socket.onclose = () => resolve({ opened, messages });
          setTimeout(() => resolve({ opened, messages }), 10000);
        });
      },
      `ws://${new URL(baseURL ?? '').host}${HUB}/user/alice/j2c/api/jobs/${aliceJob}/stream`
    );
    expect(ws).toEqual({ opened: false, messages: 0 });
    await bob.context().close();
  });

  test("alice's server stopped and started from the hub mid-job: the log completes, every line once", async ({
    baseURL
  }) => {
    const EPOCHS = 40;
    const panel = await openComputePanel(alice);
    await panel.getByLabel('Project folder', { exact: true }).fill(PROJECT);
    await panel.getByLabel('Entry point', { exact: true }).fill('train.py');
    await panel
      .getByLabel('Arguments', { exact: true })
      .fill(`--epochs ${EPOCHS} --sleep 0.5`);
    const ids = () =>
      alice.locator('.j2c-LogWidget').evaluateAll(els => els.map(e => e.id));
    const known = new Set(await ids());
    await panel.getByRole('button', { name: 'Send to Compute' }).click();
    let jobId = '';
    await expect
      .poll(
        async () => {
          jobId = ((await ids()).find(id => !known.has(id)) ?? '').replace(
            /^j2c-log-/,
            ''
          );
          return jobId;
        },
        { timeout: 60000 }
      )
      .not.toBe('');
    const log = alice.locator(`#j2c-log-${jobId}`);
    expect(jobId).not.toBe(aliceJob);
    await expect
      .poll(() => logText(alice, jobId), { timeout: 90000 })
      .toContain(`epoch 3/${EPOCHS}`);
    // Live: the lines show while the job runs, carried by the hub's proxy.
    await expect(log.locator('[data-j2c="status"]')).toHaveText('running');
    expect(
      aliceFrames.some(
        f =>
          f.url.includes(`${HUB}/user/alice/j2c/api/jobs/${jobId}/stream`) &&
          f.text.includes(`epoch 3/${EPOCHS} `)
      )
    ).toBe(true);

    const admin = await hubAdmin(baseURL ?? '');
    const stop = await admin.delete(`${HUB}/hub/api/users/alice/server`);
    expect([202, 204]).toContain(stop.status());
    await expect
      .poll(() => serverReady(admin, 'alice'), { timeout: 60000 })
      .toBe('stopped');
    const stoppedAt = (await logText(alice, jobId)).split('\n').length;

    const start = await admin.post(`${HUB}/hub/api/users/alice/server`);
    expect([201, 202]).toContain(start.status());
    await expect
      .poll(() => serverReady(admin, 'alice'), { timeout: 180000 })
      .toBe('ready');

    // The page was left as it was. The restarted server made a new cookie secret (JupyterHub
    // does that on every spawn) and takes its cookie only from navigations: the log panel's
    // reconnection gets a 403, renews the login with the hub in a hidden frame, and goes on
    // from the last line it had.
    await expectStatus(log, 'succeeded', 180000);
    // The badge follows the status event; the job's last line may be drawn just after it.
    await expect
      .poll(
        async () => countLines(await logText(alice, jobId), /^final accuracy /),
        { timeout: 10000 }
      )
      .toBe(1);
    const text = await logText(alice, jobId);
    expect(text.split('\n').length).toBeGreaterThan(stoppedAt);
    expectEveryEpochOnce(text, EPOCHS);
    // The output is the job's own: j2c's lines went to the diary, none into it.
    expect(text).not.toMatch(/^(\[j2c\]|j2c:) /m);
    await admin.dispose();
  });
  test('%j2c submit in a notebook streams into the cell through the hub', async () => {
    const name = `${PROJECT}/magic.ipynb`;
    const notebook = {
      cells: [
        {
          cell_type: 'code',
          id: 'magic',
          metadata: {},
          execution_count: null,
          outputs: [],
          source: [
            '%load_ext j2c_server\n',
            'job = %j2c submit train.py -- --epochs 3'
          ]
        }
      ],
      metadata: {
        kernelspec: {
          display_name: 'Python 3',
          language: 'python',
          name: 'python3'
        }
      },
      nbformat: 4,
      nbformat_minor: 5
    };
    const xsrf = (await alice.context().cookies()).find(
      c => c.name === '_xsrf'
    );
    const saved = await alice.request.put(
      `${HUB}/user/alice/api/contents/${name}`,
      {
        data: { type: 'notebook', format: 'json', content: notebook },
        headers: { 'X-XSRFToken': xsrf?.value ?? '' }
      }
    );
    expect(saved.ok()).toBe(true);
    await alice.goto(`${HUB}/user/alice/lab/tree/${name}`);
    await expect(
      alice.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    ).toBeVisible({ timeout: 120000 });
    // JupyterLab may still ask which kernel to use (its dialog would take the keys): the
    // notebook's own, preselected.
    const choose = alice
      .getByRole('dialog')
      .getByRole('button', { name: 'Select' });
    const asked = await choose
      .waitFor({ state: 'visible', timeout: 5000 })
      .then(() => true)
      .catch(() => false);
    if (asked) {
      await choose.click();
    }
    await expect(alice.getByRole('dialog')).toHaveCount(0, { timeout: 30000 });
    await expect(
      alice.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    ).toBeVisible({ timeout: 120000 });
    await alice.locator('.jp-Cell .jp-InputArea-editor').first().click();
    await alice.keyboard.press('Shift+Enter');
    const output = alice.locator('.jp-Cell .jp-OutputArea').first();
    await expect(output).toContainText('epoch 1/3', { timeout: 120000 });
    await expect(output).toContainText('epoch 3/3', { timeout: 120000 });
    await expect(output).toContainText('succeeded', { timeout: 120000 });
    // The kernel wrote alice's registry: the job shows in her Compute panel.
    const panel = await openComputePanel(alice);
    await expect(
      panel.locator('.j2c-Job[data-status="succeeded"]')
    ).toHaveCount(3, { timeout: 60000 });
  });
});
