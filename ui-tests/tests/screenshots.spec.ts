import { expect, test } from '@jupyterlab/galata';

import { expectStatus, lastLogPanel, openComputePanel } from './helpers';

test.use({ viewport: { width: 1440, height: 900 } });

/**
 * The README's screenshots, light and dark: the Compute panel and a finished job's log (the
 * job's own output, j2c's lines folded into the timeline); a failed job's log (why, at the top,
 * and j2c's diary unfolded where it failed).
 */
test('screenshots of the Compute panel and a job log, light and dark', async ({
  page
}) => {
  await page.goto();
  await page.filebrowser.open('digits/train.py');
  const sidebar = await openComputePanel(page);
  await sidebar
    .getByLabel('Arguments', { exact: true })
    .fill('--epochs 12 --sleep 0.05');
  await expect(
    sidebar.locator('.j2c-Preflight [data-layer="venv"]')
  ).toBeVisible({
    timeout: 30000
  });
  await page.getByRole('main').locator('.j2c-SendButton').first().click();
  const { panel } = await lastLogPanel(page);
  await expectStatus(panel, 'succeeded');
  await openComputePanel(page);
  await sidebar.locator('.j2c-Preflight').scrollIntoViewIfNeeded();
  const toast = page.locator('.Toastify__toast');
  // "Job train.py succeeded" (beside the send's own "first send of this project" note)
  await expect(toast.filter({ hasText: 'succeeded' })).toBeVisible({
    timeout: 30000
  });
  await page.evaluate(() =>
    (
      window as unknown as {
        jupyterapp: { commands: { execute(id: string): Promise<unknown> } };
      }
    ).jupyterapp.commands.execute('apputils:dismiss-notification')
  );
  await expect(toast).toHaveCount(0);

  await page.screenshot({ path: '../docs/images/compute-panel.png' });
  await page.theme.setDarkTheme();
  await expect(page.locator('body')).toHaveAttribute(
    'data-jp-theme-light',
    'false'
  );
  await page.waitForTimeout(500); // the log view re-reads its colours on the next frame
  await page.screenshot({ path: '../docs/images/compute-panel-dark.png' });
});

const FAILS = `import sys
print("loading 1,600 samples")
lr = float(sys.argv[sys.argv.index("--lr") + 1])
if lr <= 0:
    raise ValueError(f"learning rate must be positive, got {lr}")
`;

test('screenshots of a failed job, light and dark', async ({ page }) => {
  await page.contents.uploadContent(FAILS, 'text', 'tuning/train.py');
  await page.goto();
  const sidebar = await openComputePanel(page);
  for (const [label, value] of Object.entries({
    'Project folder': 'tuning',
    'Entry point': 'train.py',
    'Virtual environment': '',
    Arguments: '--lr -0.1'
  })) {
    await sidebar.getByLabel(label, { exact: true }).fill(value);
  }
  await sidebar.getByRole('button', { name: 'Send to Compute' }).click();
  const { panel } = await lastLogPanel(page);
  await expectStatus(panel, 'failed');
  await expect(panel.locator('[data-j2c="failure"]')).toBeVisible();
  await expect(panel.locator('[data-j2c="diary"]')).toBeVisible();
  const toast = page.locator('.Toastify__toast');
  await expect(toast.filter({ hasText: 'failed' })).toBeVisible({
    timeout: 30000
  });
  // Dismissed until none is left (a notification may still be on its way).
  await expect
    .poll(async () => {
      await page.evaluate(() =>
        (
          window as unknown as {
            jupyterapp: { commands: { execute(id: string): Promise<unknown> } };
          }
        ).jupyterapp.commands.execute('apputils:dismiss-notification')
      );
      await page.waitForTimeout(300);
      return toast.count();
    })
    .toBe(0);
  await page.screenshot({ path: '../docs/images/log-panel-failed.png' });
  await page.theme.setDarkTheme();
  await page.waitForTimeout(500);
  await page.screenshot({ path: '../docs/images/log-panel-failed-dark.png' });
});
