/**
 * The sweep view with a real sweep: six variants of the digits example (lr × seed) sent as one
 * sweep to the local scheduler; the Compute panel's sweep section shows one table row per
 * variant with its values, status and metric (from each variant's metrics.json), sorts by a
 * column header, plots the metric against lr, and opens a variant's log from its row.
 */
import AxeBuilder from '@axe-core/playwright';
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import type { JobRecord } from '../../src/models';
import { lastLogPanel, logText, openComputePanel } from './helpers';

test.use({ viewport: { width: 1440, height: 900 } });

const LRS = ['0.5', '0.05', '0.005'];
const SEEDS = ['0', '1'];

interface IPageWindow {
  jupyterapp: {
    commands: { execute(id: string, args: unknown): Promise<unknown> };
  };
}

/** Send the sweep over REST, as the form's Sweep section and `j2c submit --sweep` do. */
async function sendSweep(page: IJupyterLabPageFixture): Promise<string> {
  const answer = await page.request.post('/j2c/api/jobs', {
    data: {
      code_path: 'digits',
      call_path: 'train.py',
      venv_path: 'digits/.venv',
      args: [
        '--epochs',
        '4',
        '--samples',
        '400',
        '--lr',
        '{lr}',
        '--seed',
        '{seed}'
      ],
      name: 'digits sweep',
      new: true,
      sweep: { grid: { lr: LRS, seed: SEEDS } }
    }
  });
  expect(answer.ok(), await answer.text()).toBe(true);
  return ((await answer.json()) as { id: string }).id;
}

async function openSweep(
  page: IJupyterLabPageFixture,
  id: string
): Promise<Locator> {
  await page.evaluate(
    sweepId =>
      (window as unknown as IPageWindow).jupyterapp.commands
        .execute('j2c:open-sweep', { id: sweepId })
        .then(() => undefined),
    id
  );
  const view = page.locator(`[data-j2c="sweep-view"][data-sweep-id="${id}"]`);
  await expect(view).toBeVisible();
  return view;
}

/** The table's column of `key` (a data-column value), top to bottom. */
async function column(table: Locator, key: string): Promise<string[]> {
  return table.locator(`tbody tr > [data-column="${key}"]`).allTextContents();
}

test('a real sweep: one row per variant, sortable, plotted, each row opens its log', async ({
  page
}) => {
  test.setTimeout(300000);
  await page.goto();
  const id = await sendSweep(page);
  await expect
    .poll(
      async () =>
        (
          (await (
            await page.request.get(`/j2c/api/jobs/${id}`)
          ).json()) as JobRecord
        ).status,
      { timeout: 240000, intervals: [1000] }
    )
    .toBe('succeeded');
  // The jobs list as a user finds it: the sweep is one row with its aggregate; its variants
  // are rows of the sweep view, not of the list.
  await page.reload();
  await page.sidebar.setWidth(600, 'left');
  const panel = await openComputePanel(page);
  const row = panel.locator(`.j2c-Job[data-job-id="${id}"]`);
  await expect(row.locator('[data-j2c="sweep-aggregate"]')).toHaveText(
    '6/6 succeeded'
  );
  const record = (await (
    await page.request.get(`/j2c/api/jobs/${id}`)
  ).json()) as JobRecord;
  for (const child of record.sweep?.children ?? []) {
    await expect(panel.locator(`.j2c-Job[data-job-id="${child}"]`)).toHaveCount(
      0
    );
  }
  await row.locator('[data-action="sweep"]').click();
  await checkSweepView(page, id);
});

async function checkSweepView(
  page: IJupyterLabPageFixture,
  id: string
): Promise<void> {
  const view = await openSweep(page, id);
  const table = view.locator('table[data-j2c="sweep-table"]');
  const rows = table.locator('tbody tr');

  await expect(view.locator('[data-j2c="sweep-summary"]')).toHaveText(
    '6/6 succeeded',
    { timeout: 180000 }
  );
  await expect(rows).toHaveCount(LRS.length * SEEDS.length);
  // A real table: a caption and column headers, the sorted one says so.
  await expect(table.locator('caption')).toContainText('Variants of');
  await expect(table.locator('thead th[scope="col"]')).toHaveCount(7);
  await expect(table.locator('th[data-column="index"]')).toHaveAttribute(
    'aria-sort',
    'ascending'
  );
  expect(await column(table, 'param:lr')).toEqual(
    LRS.flatMap(lr => SEEDS.map(() => lr))
  );
  expect(await column(table, 'param:seed')).toEqual(LRS.flatMap(() => SEEDS));
  expect(await column(table, 'status')).toEqual(Array(6).fill('succeeded'));
  expect(await column(table, 'exit')).toEqual(Array(6).fill('0'));

  // The metric from each variant's metrics.json: accuracy is chosen, every row has one.
  await view.locator('[data-j2c="sweep-metric"]').selectOption('accuracy');
  const accuracy = (await column(table, 'metric:accuracy')).map(Number);
  expect(accuracy.every(value => value > 0 && value <= 1)).toBe(true);

  // Sorting: by accuracy, ascending then descending; empty values never lead.
  const header = table.locator('th[data-column="metric:accuracy"]');
  await header.getByRole('button').click();
  await expect(header).toHaveAttribute('aria-sort', 'ascending');
  const ascending = (await column(table, 'metric:accuracy')).map(Number);
  expect(ascending).toEqual([...accuracy].sort((a, b) => a - b));
  await header.getByRole('button').click();
  await expect(header).toHaveAttribute('aria-sort', 'descending');
  const descending = (await column(table, 'metric:accuracy')).map(Number);
  expect(descending).toEqual([...accuracy].sort((a, b) => b - a));
  await table.locator('th[data-column="param:lr"]').getByRole('button').click();
  expect(await column(table, 'param:lr')).toEqual(
    [...LRS].sort((a, b) => Number(a) - Number(b)).flatMap(lr => [lr, lr])
  );

  // The plot: accuracy against lr, one point per variant (a line per seed), with the same
  // numbers as its text alternative.
  await view.locator('[data-j2c="sweep-axis"]').selectOption('param:lr');
  const plot = view.locator('[data-j2c="sweep-plot"] svg');
  await expect(plot).toBeVisible();
  await expect(plot.locator('circle.j2c-SweepPlot-point')).toHaveCount(6);
  await expect(plot).toHaveAttribute('role', 'img');
  const description = (await plot.locator('desc').textContent()) ?? '';
  expect(description).toContain('accuracy against lr');
  for (const value of accuracy) {
    expect(description).toContain(value.toPrecision(4));
  }
  // The example logs a history per epoch: the plot can also show accuracy over steps.
  await view.locator('[data-j2c="sweep-axis"]').selectOption('step');
  await expect(
    view.locator('[data-j2c="sweep-plot"] svg .j2c-SweepPlot-series')
  ).toHaveCount(6);
  await view.locator('[data-j2c="sweep-axis"]').selectOption('param:lr');

  await page.screenshot({ path: '../docs/images/sweep-view.png' });

  // axe finds nothing serious or critical in the view (table, controls, plot).
  const scan = await new AxeBuilder({ page })
    .include('[data-j2c="sweep-view"]')
    .analyze();
  const serious = scan.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id}: ${v.nodes.map(n => n.target.join(' ')).join(', ')}`);
  expect(serious).toEqual([]);

  // A row opens that variant's log: its own args are in it.
  const row = rows.filter({
    has: page.locator('[data-column="param:lr"]', { hasText: /^0\.05$/ })
  });
  const target = row.filter({
    has: page.locator('[data-column="param:seed"]', { hasText: /^1$/ })
  });
  const jobId = (await target.getAttribute('data-job-id')) ?? '';
  expect(jobId).not.toBe('');
  await target.locator('[data-column="status"]').click();
  const { jobId: opened } = await lastLogPanel(page);
  expect(opened).toBe(jobId);
  await expect
    .poll(() => logText(page, jobId), { timeout: 30000 })
    .toContain('final accuracy');
}
