/**
 * The Send form's Sweep section: parameters typed as NAME = comma-separated values (added and
 * removed from the keyboard), the live variant count, a real 6-variant sweep of the digits
 * example sent from the form (the sweep view opens with one row per variant and its values),
 * and the refusals shown by the section with nothing sent: a swept name no argument uses (the
 * server's words), a sweep over the server's cap, a name that is not one, a row without values
 * (the form's own check).
 */
import AxeBuilder from '@axe-core/playwright';
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import type { JobRecord } from '../../src/models';
import { openComputePanel } from './helpers';

test.use({ viewport: { width: 1440, height: 900 } });

const LRS = ['0.5', '0.05', '0.005'];
const SEEDS = ['0', '1'];

/** Fill the form's plain fields by their labels, as a user would. */
async function fillFields(
  panel: Locator,
  fields: { [label: string]: string }
): Promise<void> {
  for (const [label, value] of Object.entries(fields)) {
    await panel.getByLabel(label, { exact: true }).fill(value);
  }
}

/** The Sweep section, unfolded. */
async function openSweepSection(panel: Locator): Promise<Locator> {
  const section = panel.locator('[data-j2c="sweep-section"]');
  await expect(section).not.toHaveAttribute('open');
  await section.locator('summary').click();
  await expect(section).toHaveAttribute('open');
  return section;
}

/** Add a parameter from the keyboard: Enter on "Add parameter", type, Tab, type. */
async function addParam(
  page: IJupyterLabPageFixture,
  section: Locator,
  name: string,
  values: string
): Promise<void> {
  await section.getByRole('button', { name: 'Add parameter' }).focus();
  await page.keyboard.press('Enter');
  const names = section.locator('[data-j2c="sweep-name"]');
  await expect(names.last()).toBeFocused();
  await page.keyboard.type(name);
  await page.keyboard.press('Tab');
  await expect(
    section.locator('[data-j2c="sweep-values"]').last()
  ).toBeFocused();
  await page.keyboard.type(values);
}

async function jobCount(page: IJupyterLabPageFixture): Promise<number> {
  return ((await (await page.request.get('/j2c/api/jobs')).json()) as unknown[])
    .length;
}

/** The table's column of `key` (a data-column value), top to bottom. */
async function column(table: Locator, key: string): Promise<string[]> {
  return table.locator(`tbody tr > [data-column="${key}"]`).allTextContents();
}

test('a sweep sent from the form: the sweep view shows each variant with its values', async ({
  page
}) => {
  test.setTimeout(300000);
  await page.goto();
  await page.sidebar.setWidth(600, 'left');
  const panel = await openComputePanel(page);
  await fillFields(panel, {
    'Project folder': 'digits',
    'Entry point': 'train.py',
    'Virtual environment': 'digits/.venv',
    Arguments: '--epochs 2 --samples 300 --lr {lr} --seed {seed}',
    'Environment variables': 'PLAIN=as-is\nTAG=run-{seed}'
  });
  const section = await openSweepSection(panel);
  const count = section.locator('[data-j2c="sweep-count"]');
  await expect(count).toHaveText('No parameters: a single job.');

  await addParam(page, section, 'lr', LRS.join(', '));
  await expect(count).toHaveText('3 variants');
  await addParam(page, section, 'seed', SEEDS.join(','));
  await expect(count).toHaveText('3 × 2 = 6 variants');
  await expect(section.locator('summary')).toHaveText('Sweep (6 variants)');
  await expect(panel.locator('[data-field="args"] .j2c-Field-hint')).toHaveText(
    'Each variant fills in {lr}, {seed} here'
  );

  // A third row, removed again: the count follows, the focus goes to the row that took its
  // place, else the one above (else the Add button).
  await addParam(page, section, 'batch', '16, 32');
  await expect(count).toHaveText('3 × 2 × 2 = 12 variants');
  // From its values, Tab reaches the row's Remove button; Enter removes the row.
  await page.keyboard.press('Tab');
  await expect(
    section.getByRole('button', { name: 'Remove parameter 3' })
  ).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(section.locator('[data-j2c="sweep-param"]')).toHaveCount(2);
  await expect(section.getByLabel('Name of parameter 2')).toBeFocused();
  await expect(count).toHaveText('3 × 2 = 6 variants');
  await section.getByLabel('Max parallel', { exact: true }).fill('3');
  await section.getByLabel('Retries', { exact: true }).fill('1');

  // Labels, names and states: axe finds nothing serious in the section.
  const scan = await new AxeBuilder({ page })
    .include('[data-j2c="sweep-section"]')
    .analyze();
  const serious = scan.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id}: ${v.nodes.map(n => n.target.join(' ')).join(', ')}`);
  expect(serious).toEqual([]);

  // The docs' screenshot: the Arguments field down to the end of the Sweep section (the
  // Jobs section folded for the height, then unfolded again).
  const jobsTitle = panel.locator('[aria-label="Jobs Section"]');
  await jobsTitle.click();
  await expect(jobsTitle).toHaveAttribute('aria-expanded', 'false');
  await section.getByLabel('Max parallel', { exact: true }).blur();
  await count.scrollIntoViewIfNeeded();
  await panel.locator('[data-field="args"]').scrollIntoViewIfNeeded();
  const top = await panel.locator('[data-field="args"]').boundingBox();
  const bottom = await section.boundingBox();
  if (top && bottom) {
    await page.screenshot({
      path: '../docs/images/sweep-form.png',
      clip: {
        x: bottom.x - 8,
        y: top.y - 8,
        width: bottom.width + 16,
        height: bottom.y + bottom.height - top.y + 16
      }
    });
  }

  await jobsTitle.click();
  await expect(jobsTitle).toHaveAttribute('aria-expanded', 'true');

  const before = await jobCount(page);
  await panel.getByRole('button', { name: 'Send to Compute' }).click();

  // The sweep view opens (not a log panel), on the sweep just sent.
  const view = panel.locator('[data-j2c="sweep-view"]');
  await expect(view).toBeVisible({ timeout: 60000 });
  const id = (await view.getAttribute('data-sweep-id')) ?? '';
  expect(id).not.toBe('');
  await expect(page.locator('.j2c-LogWidget')).toHaveCount(0);
  const record = (await (
    await page.request.get(`/j2c/api/jobs/${id}`)
  ).json()) as JobRecord;
  expect(record.request.args).toEqual([
    '--epochs',
    '2',
    '--samples',
    '300',
    '--lr',
    '{lr}',
    '--seed',
    '{seed}'
  ]);
  // The env value that uses a swept name is the sweep's template; the other stays as written.
  expect(record.request.env).toEqual({ PLAIN: 'as-is' });
  expect(record.request.sweep).toMatchObject({
    grid: { lr: LRS, seed: SEEDS },
    env: { TAG: 'run-{seed}' },
    max_parallel: 3,
    retries: 1
  });
  expect(record.sweep?.size).toBe(6);

  const table = view.locator('table[data-j2c="sweep-table"]');
  await expect(table.locator('tbody tr')).toHaveCount(6);
  expect(await column(table, 'param:lr')).toEqual(
    LRS.flatMap(lr => SEEDS.map(() => lr))
  );
  expect(await column(table, 'param:seed')).toEqual(LRS.flatMap(() => SEEDS));
  await expect(view.locator('[data-j2c="sweep-summary"]')).toHaveText(
    '6/6 succeeded',
    { timeout: 240000 }
  );
  expect(await column(table, 'exit')).toEqual(Array(6).fill('0'));
  // One parent and six variants were sent, nothing else.
  const children = (await (
    await page.request.get(`/j2c/api/jobs/${id}`)
  ).json()) as JobRecord;
  expect(children.sweep?.children).toHaveLength(6);
  expect(await jobCount(page)).toBeGreaterThan(before);

  // The rows stay in the form for the next send.
  // (Opening the sweep view folded the form away: its section title brings it back.)
  await panel.locator('[aria-label="Send a job Section"]').click();
  await expect(section.locator('[data-j2c="sweep-name"]')).toHaveCount(2);
  await expect(count).toHaveText('3 × 2 = 6 variants');
});

test('a refused sweep shows its error by the Sweep section and sends nothing', async ({
  page
}) => {
  await page.goto();
  const panel = await openComputePanel(page);
  await fillFields(panel, {
    'Project folder': 'digits',
    'Entry point': 'train.py',
    'Virtual environment': 'digits/.venv',
    Arguments: '--epochs 1 --seed {seed}'
  });
  const section = await openSweepSection(panel);
  await addParam(page, section, 'lr', '0.5, 0.05');
  await addParam(page, section, 'seed', '0, 1');
  const before = await jobCount(page);
  const send = panel.getByRole('button', { name: 'Send to Compute' });
  const error = section.locator('[data-j2c="sweep-error"]');

  // A swept name no argument uses: the server's words, by the section.
  await send.click();
  await expect(error).toContainText(
    'lr is swept but no argument or env value uses {lr}'
  );
  await expect(error).toHaveAttribute('role', 'alert');
  await expect(panel.locator('.j2c-Form-error')).toHaveCount(0);
  expect(await jobCount(page)).toBe(before);
  await expect(page.locator('.j2c-LogWidget')).toHaveCount(0);
  await expect(panel.locator('[data-j2c="sweep-view"]')).toHaveCount(0);

  // Using it in the arguments clears the error; the rows are still there.
  await panel
    .getByLabel('Arguments', { exact: true })
    .fill('--epochs 1 --lr {lr} --seed {seed}');
  await expect(error).toHaveCount(0);
  await expect(section.locator('[data-j2c="sweep-param"]')).toHaveCount(2);

  // Over the server's cap (256 by default): 17 × 16 = 272 variants, refused in its words.
  const many = (n: number) =>
    Array.from({ length: n }, (_, i) => String(i)).join(',');
  await section
    .getByLabel('Values of parameter 1, comma-separated')
    .fill(many(17));
  await section
    .getByLabel('Values of parameter 2, comma-separated')
    .fill(many(16));
  await expect(section.locator('[data-j2c="sweep-count"]')).toHaveText(
    '17 × 16 = 272 variants'
  );
  await send.click();
  await expect(error).toContainText('272 variants is more than the limit');
  expect(await jobCount(page)).toBe(before);

  // A name that is not one: refused by the server's model, shown by the section too.
  await section
    .getByLabel('Values of parameter 2, comma-separated')
    .fill('0,1');
  await section.getByLabel('Name of parameter 1').fill('1lr');
  await panel
    .getByLabel('Arguments', { exact: true })
    .fill('--epochs 1 --lr {1lr} --seed {seed}');
  await send.click();
  await expect(error).toContainText("'1lr' is not a parameter name");
  await expect(panel.locator('.j2c-Form-error')).toHaveCount(0);
  expect(await jobCount(page)).toBe(before);
  await section.getByLabel('Name of parameter 1').fill('lr');
  await panel
    .getByLabel('Arguments', { exact: true })
    .fill('--epochs 1 --lr {lr} --seed {seed}');

  // More retries than the server allows: its words, by the Retries field.
  const retries = section.getByLabel('Retries', { exact: true });
  await retries.fill('11');
  await send.click();
  await expect(
    section.locator('[data-field="retries"] .j2c-Field-error')
  ).toContainText('10');
  await expect(retries).toHaveAttribute('aria-invalid', 'true');
  expect(await jobCount(page)).toBe(before);
  await retries.fill('');

  // A row with a name and no values: the form's own check marks that row; nothing is sent.
  await section.getByLabel('Values of parameter 2, comma-separated').fill('');
  await send.click();
  const row = section.locator('[data-j2c="sweep-param"]').nth(1);
  await expect(row.locator('.j2c-Field-error')).toHaveText(
    'Give this parameter at least one value.'
  );
  await expect(row.locator('[data-j2c="sweep-values"]')).toHaveAttribute(
    'aria-invalid',
    'true'
  );
  expect(await jobCount(page)).toBe(before);
  await expect(page.locator('.j2c-LogWidget')).toHaveCount(0);
});
