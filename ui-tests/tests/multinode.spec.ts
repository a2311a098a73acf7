import { expect, test } from '@jupyterlab/galata';

import {
  countLines,
  expectStatus,
  lastLogPanel,
  logText,
  openComputePanel
} from './helpers';

test.use({ viewport: { width: 1440, height: 900 } });

/**
 * A job on two nodes from the form: two ranks of the example's training on the local
 * scheduler, every line prefixed with its rank, and the log panel's rank filter.
 */
test('a two-node job shows rank prefixes and filters the log by rank', async ({
  page
}) => {
  await page.goto();
  await page.filebrowser.open('digits/train.py');
  const sidebar = await openComputePanel(page);
  await sidebar.getByLabel('Nodes', { exact: true }).fill('2');
  await sidebar
    .getByLabel('Arguments', { exact: true })
    .fill('--epochs 3 --sleep 0.05');
  await page.getByRole('main').locator('.j2c-SendButton').first().click();
  const { panel, jobId } = await lastLogPanel(page);
  await expectStatus(panel, 'succeeded');

  const both = await logText(page, jobId);
  expect(countLines(both, /^\[0\] epoch 3\/3 /)).toBe(1);
  expect(countLines(both, /^\[1\] epoch 3\/3 /)).toBe(1);

  const filter = page.locator('.j2c-RankFilter select');
  await expect(filter).toBeVisible();
  await filter.selectOption({ label: 'Rank 1' });
  await expect
    .poll(async () => countLines(await logText(page, jobId), /^\[0\] /))
    .toBe(0);
  const one = await logText(page, jobId);
  expect(countLines(one, /^\[1\] epoch 3\/3 /)).toBe(1);
  expect(one).not.toMatch(/^(\[j2c\]|j2c:) /m); // j2c's lines are in the diary
  await page.screenshot({ path: '../docs/images/multinode-rank-filter.png' });

  await filter.selectOption({ label: 'All ranks' });
  await expect
    .poll(async () => countLines(await logText(page, jobId), /^\[0\] epoch/))
    .toBe(3);
});
