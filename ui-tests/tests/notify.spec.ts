/**
 * A word when a job ends: while the Lab's tab is hidden (emulated: `document.visibilityState`
 * and `hidden` overridden, `visibilitychange` dispatched), a job's end raises a browser
 * notification (permission granted to the context; the page's `Notification` wrapped to record
 * what it is asked) and a badge on the Compute tab; the toast has the duration and
 * "Open results"; the permission button asks the browser once.
 */
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';

import { randomUUID } from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { openComputePanel } from './helpers';

const PROJECT = 'notify-job';

test.use({
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    'j2c:plugin': { notifyInBrowser: true }
  }
});

interface IRecorded {
  title: string;
  body?: string;
  tag?: string;
}

/**
 * Send a job that prints, then waits for its gate file (created by `open`) before it ends:
 * the test decides when it ends, so it is seen running first whatever the machine's speed.
 */
async function send(
  page: IJupyterLabPageFixture
): Promise<{ id: string; open: () => void }> {
  const gate = path.join(os.tmpdir(), `j2c-notify-gate-${randomUUID()}`);
  await page.contents.uploadContent(
    'import os, sys, time\nprint("started", flush=True)\n' +
      'while not os.path.exists(sys.argv[1]):\n    time.sleep(0.1)\nprint("done")\n',
    'text',
    `${PROJECT}/gated.py`
  );
  const answer = await page.request.post('/j2c/api/jobs', {
    data: {
      code_path: PROJECT,
      call_path: 'gated.py',
      args: [gate],
      venv_path: null,
      name: 'notify-gated',
      new: true
    }
  });
  expect(answer.ok(), await answer.text()).toBe(true);
  const id = ((await answer.json()) as { id: string }).id;
  return { id, open: () => fs.writeFileSync(gate, '') };
}

async function setHidden(
  page: IJupyterLabPageFixture,
  hidden: boolean
): Promise<void> {
  await page.evaluate(hide => {
    if (hide) {
      Object.defineProperty(document, 'visibilityState', {
        configurable: true,
        get: () => 'hidden'
      });
      Object.defineProperty(document, 'hidden', {
        configurable: true,
        get: () => true
      });
    } else {
      // The own properties shadow Document.prototype's: removing them restores the truth.
      delete (document as unknown as { visibilityState?: string })
        .visibilityState;
      delete (document as unknown as { hidden?: boolean }).hidden;
    }
    document.dispatchEvent(new Event('visibilitychange'));
  }, hidden);
}

test('a job that ends while the tab is hidden raises a browser notification and the badge', async ({
  page
}) => {
  await page.context().grantPermissions(['notifications']);
  // Record every notification asked for (headless Chromium may not show them).
  await page.addInitScript(() => {
    const Real = window.Notification;
    const calls: { title: string; body?: string; tag?: string }[] = [];
    (window as unknown as { j2cNotified: typeof calls }).j2cNotified = calls;
    function Recording(title: string, options?: NotificationOptions) {
      calls.push({ title, body: options?.body, tag: options?.tag });
      try {
        return new Real(title, options);
      } catch {
        return { close: () => undefined, onclick: null };
      }
    }
    Object.defineProperty(Recording, 'permission', {
      get: () => Real.permission
    });
    (Recording as unknown as { requestPermission: unknown }).requestPermission =
      () => Real.requestPermission();
    (window as unknown as { Notification: unknown }).Notification = Recording;
  });
  await page.goto();
  expect(await page.evaluate(() => Notification.permission)).toBe('granted');
  const sidebar = await openComputePanel(page);
  // Granted already: no button asks again.
  await expect(
    sidebar.getByRole('button', { name: 'Allow browser notifications' })
  ).toHaveCount(0);

  const { id, open } = await send(page);
  await expect(
    sidebar.locator(`li[data-job-id="${id}"][data-status="running"]`)
  ).toBeVisible({ timeout: 60000 });
  await setHidden(page, true);
  open();

  const notified = (): Promise<IRecorded[]> =>
    page.evaluate(
      () => (window as unknown as { j2cNotified: IRecorded[] }).j2cNotified
    );
  await expect
    .poll(async () => (await notified()).length, { timeout: 60000 })
    .toBe(1);
  const [shown] = await notified();
  expect(shown.title).toBe('j2c: job notify-gated succeeded');
  expect(shown.body).toMatch(
    /^Job notify-gated succeeded \(exit code 0\) in \d/
  );
  expect(shown.tag).toBe(`j2c-${id}`);

  // The badge: the sidebar is open, but nobody looks at a hidden tab.
  const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-j2c-ended]');
  await expect(tab).toHaveAttribute('data-j2c-ended', '1');
  await expect(tab).toHaveAttribute(
    'title',
    'Compute: 1 job ended since you last looked'
  );

  // Back in the tab with the sidebar shown: seen, the badge goes.
  await setHidden(page, false);
  await expect(tab).toHaveCount(0);
  // The toast: duration and "Open results", which shows the results in the log panel.
  const toast = page
    .locator('.Toastify__toast')
    .filter({ hasText: 'Job notify-gated succeeded (exit code 0) in' });
  await expect(toast).toBeVisible();
  await toast.getByRole('button', { name: 'Open results' }).click();
  await expect(page.locator(`#j2c-log-${id} [data-j2c="results"]`)).toBeFocused(
    { timeout: 30000 }
  );
  // Visible, another end shows no browser notification (the toast is enough).
  expect((await notified()).length).toBe(1);
});

test('jobs that ended while the Compute panel was closed count on its tab', async ({
  page
}) => {
  await page.goto();
  const sidebar = await openComputePanel(page);
  const { id, open } = await send(page);
  await expect(
    sidebar.locator(`li[data-job-id="${id}"][data-status="running"]`)
  ).toBeVisible({ timeout: 60000 });
  await page.getByRole('tab', { name: 'Compute' }).click(); // close it
  await expect(sidebar).toBeHidden();
  open();
  const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-j2c-ended]');
  await expect(tab).toHaveAttribute('data-j2c-ended', '1', { timeout: 60000 });
  // A reload keeps the count (what was seen is stored), opening the panel clears it.
  await page.reload();
  await expect(tab).toHaveAttribute('data-j2c-ended', '1', { timeout: 30000 });
  await page.getByRole('tab', { name: /Compute/ }).click();
  await expect(tab).toHaveCount(0);
});

test('the Jobs section asks for the permission once, from a click', async ({
  page
}) => {
  // A browser that has not been asked: the page's Notification says "default" until asked.
  await page.addInitScript(() => {
    let permission: NotificationPermission = 'default';
    const asked: number[] = [];
    (window as unknown as { j2cAsked: number[] }).j2cAsked = asked;
    const Fake = function () {
      return { close: () => undefined };
    };
    Object.defineProperty(Fake, 'permission', { get: () => permission });
    (Fake as unknown as { requestPermission: unknown }).requestPermission =
      () => {
        asked.push(Date.now());
        permission = 'granted';
        return Promise.resolve(permission);
      };
    (window as unknown as { Notification: unknown }).Notification = Fake;
  });
  await page.goto();
  const sidebar = await openComputePanel(page);
  const allow = sidebar.getByRole('button', {
    name: 'Allow browser notifications'
  });
  await expect(allow).toBeVisible();
  expect(
    await page.evaluate(
      () => (window as unknown as { j2cAsked: number[] }).j2cAsked.length
    )
  ).toBe(0); // nothing asked before the click
  await allow.click();
  await expect(allow).toHaveCount(0);
  expect(
    await page.evaluate(
      () => (window as unknown as { j2cAsked: number[] }).j2cAsked.length
    )
  ).toBe(1);
});
