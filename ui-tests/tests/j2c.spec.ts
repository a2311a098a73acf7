import { expect, test } from '@jupyterlab/galata';

import {
  countLines,
  expectStatus,
  lastLogPanel,
  logText,
  openComputePanel,
  sendFromForm
} from './helpers';

/** The example project (ui-tests/jupyter_server_test_config.py copies it into the root). */
const PROJECT = 'digits';

test.describe('j2c extension', () => {
  test('activates and shows the Compute panel', async ({ page }) => {
    const logs: string[] = [];
    page.on('console', message => logs.push(message.text()));

    await page.goto();
    const panel = await openComputePanel(page);
    await expect(panel.locator('[data-j2c="scheduler"]')).toHaveText('local');
    await expect(panel.locator('[data-j2c="storage"]')).toHaveText('file');
    await expect(
      panel.getByLabel('Project folder', { exact: true })
    ).toBeVisible();
    await expect
      .poll(() => logs.some(l => l.includes('j2c: server extension is active')))
      .toBe(true);
  });

  test('opening a script fills the form and shows what will be sent', async ({
    page
  }) => {
    await page.goto();
    await page.filebrowser.open(`${PROJECT}/train.py`);
    const panel = await openComputePanel(page);
    await expect(
      panel.getByLabel('Project folder', { exact: true })
    ).toHaveValue(PROJECT);
    await expect(panel.getByLabel('Entry point', { exact: true })).toHaveValue(
      'train.py'
    );
    await expect(
      panel.getByLabel('Virtual environment', { exact: true })
    ).toHaveValue(`${PROJECT}/.venv`);
    const preflight = panel.locator('.j2c-Preflight');
    await expect(preflight.locator('[data-layer="code"]')).toBeVisible({
      timeout: 30000
    });
    await expect(preflight.locator('[data-layer="venv"]')).toBeVisible();
  });

  test('sends the example project from the toolbar and shows its log and succeeded', async ({
    page
  }) => {
    await page.goto();
    await page.filebrowser.open(`${PROJECT}/train.py`);
    await page.getByRole('main').locator('.j2c-SendButton').first().click();

    const { panel, jobId } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    const text = await logText(page, jobId);
    expect(countLines(text, /^epoch 5\/5 loss=/)).toBe(1);
    expect(text).toContain('final accuracy');
    await expect(panel.locator('[data-j2c="exit-code"]')).toHaveText('0');
    await expect(panel.locator('[data-step="running"]')).toHaveAttribute(
      'data-state',
      'done'
    );
    await expect(
      page.locator(`#j2c-compute-sidebar .j2c-Job[data-job-id="${jobId}"]`)
    ).toHaveAttribute('data-status', 'succeeded', { timeout: 30000 });
  });

  test('cancels a long job', async ({ page }) => {
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: '--epochs 1000 --sleep 0.5'
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expect
      .poll(() => logText(page, jobId), { timeout: 60000 })
      .toContain('epoch 2/1000');
    await panel.locator('.j2c-CancelButton button').click();
    await expectStatus(panel, 'cancelled', 60000);
    expect(await logText(page, jobId)).not.toContain('final accuracy');
  });

  test('a page reload mid-run continues the log with no line twice', async ({
    page
  }) => {
    const EPOCHS = 60;
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: `--epochs ${EPOCHS} --sleep 0.25`
    });
    const { jobId } = await lastLogPanel(page);
    await expect
      .poll(() => logText(page, jobId), { timeout: 60000 })
      .toContain(`epoch 5/${EPOCHS}`);

    // The restored layout has no Launcher, which Galata's readiness check waits for.
    await page.reload({ waitForIsReady: false });
    const restored = page.locator(`#j2c-log-${jobId}`);
    await expect(restored).toBeVisible({ timeout: 30000 });
    await expectStatus(restored, 'running', 30000);
    await expectStatus(restored, 'succeeded');
    const text = await logText(page, jobId);
    for (let epoch = 1; epoch <= EPOCHS; epoch++) {
      expect(
        countLines(text, new RegExp(`^epoch ${epoch}/${EPOCHS} `)),
        `epoch ${epoch}`
      ).toBe(1);
    }
  });

  test('a bad entry point shows a field error and sends nothing', async ({
    page
  }) => {
    await page.goto();
    const before = await (await page.request.get('/j2c/api/jobs')).json();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'nope.py'
    });

    const field = page.locator('#j2c-compute-sidebar [data-field="entry"]');
    await expect(field.locator('.j2c-Field-error')).toContainText('nope.py');
    await expect(field.locator('input')).toHaveAttribute(
      'aria-invalid',
      'true'
    );
    const after = await (await page.request.get('/j2c/api/jobs')).json();
    expect(after.length).toBe(before.length);
    await expect(page.locator('.j2c-LogWidget')).toHaveCount(0);
  });
});
