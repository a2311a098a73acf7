/**
 * The sidebar's jobs list pages like the server: with `jobsPageSize` 3 it shows the newest
 * three jobs, "Show older jobs" brings the next pages in order, and a job sent while older
 * pages are loaded neither drops nor repeats one of them.
 */
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';

import { openComputePanel } from './helpers';

const PAGE_SIZE = 3;
const JOBS = 7;
const PROJECT = 'paging-job';

test.use({
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    'j2c:plugin': { jobsPageSize: PAGE_SIZE }
  }
});

interface IJob {
  id: string;
  status: string;
  sweep?: { parent?: string | null } | null;
}

/** Send the quick job through the REST route (what the form does, without the form). */
async function send(
  page: IJupyterLabPageFixture,
  name: string
): Promise<string> {
  const answer = await page.request.post('/j2c/api/jobs', {
    data: {
      code_path: PROJECT,
      call_path: 'hello.py',
      venv_path: null,
      name,
      new: true
    }
  });
  expect(answer.ok(), await answer.text()).toBe(true);
  return ((await answer.json()) as IJob).id;
}

/**
 * Every job id the list shows, newest first (one page holds them all here): the server's
 * jobs but a sweep's variants, which earlier tests may have left (the sweep view lists them).
 */
async function allIds(page: IJupyterLabPageFixture): Promise<string[]> {
  const answer = await page.request.get('/j2c/api/jobs?limit=1000');
  return ((await answer.json()) as IJob[])
    .filter(job => !job.sweep?.parent)
    .map(job => job.id);
}

test('the jobs list loads older pages on demand, without duplicates', async ({
  page
}) => {
  await page.goto();
  await page.contents.uploadContent(
    'print("paging")\n',
    'text',
    `${PROJECT}/hello.py`
  );
  for (let i = 0; i < JOBS; i++) {
    await send(page, `paging-${i}`);
  }
  const expected = await allIds(page);
  expect(expected.length).toBeGreaterThanOrEqual(JOBS);

  const panel = await openComputePanel(page);
  const rows = panel.locator('.j2c-Jobs li.j2c-Job');
  const shownIds = (): Promise<string[]> =>
    rows.evaluateAll(items =>
      items.map(item => item.getAttribute('data-job-id') ?? '')
    );
  const older = panel.getByRole('button', { name: 'Show older jobs' });
  const count = panel.locator('[data-j2c="jobs-count"]');

  // The newest page only, as the setting asks (once the list has refreshed past jobs that
  // earlier tests left on this server).
  await expect
    .poll(shownIds, { timeout: 30000 })
    .toEqual(expected.slice(0, PAGE_SIZE));
  await expect(count).toHaveText(`${PAGE_SIZE} jobs loaded`);

  // While a page loads, its button cannot be pressed again.
  await page.route('**/j2c/api/jobs?*before=*', async route => {
    await new Promise(resolve => setTimeout(resolve, 800));
    await route.continue();
  });
  await older.click();
  await expect(
    panel.getByRole('button', { name: 'Loading older jobs…' })
  ).toBeDisabled();
  await expect(rows).toHaveCount(2 * PAGE_SIZE);
  expect(await shownIds()).toEqual(expected.slice(0, 2 * PAGE_SIZE));
  await expect(count).toHaveText(`${2 * PAGE_SIZE} jobs loaded`);

  // A new job pushes one of the newest page down: it stays, once.
  const fresh = await send(page, 'paging-new');
  await expect
    .poll(shownIds, { timeout: 30000 })
    .toEqual([fresh, ...expected.slice(0, 2 * PAGE_SIZE)]);

  // The rest, page by page, until there is no next page.
  while (await older.isVisible()) {
    await older.click();
    await expect(
      panel.getByRole('button', { name: 'Loading older jobs…' })
    ).toHaveCount(0);
  }
  await expect.poll(shownIds, { timeout: 30000 }).toEqual([fresh, ...expected]);
  const shown = await shownIds();
  expect(new Set(shown).size).toBe(shown.length);

  // A job removed from an older page leaves the list at once.
  const oldest = rows.last();
  const oldestId = shown[shown.length - 1];
  await expect(
    oldest.getByRole('button', { name: 'Remove record…' })
  ).toBeVisible({ timeout: 90000 });
  await oldest.getByRole('button', { name: 'Remove record…' }).click();
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Remove' })
    .click();
  await expect(panel.locator(`[data-job-id="${oldestId}"]`)).toHaveCount(0);
  await expect(rows).toHaveCount(shown.length - 1);
});
