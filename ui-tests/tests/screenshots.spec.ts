import { expect, test } from '@jupyterlab/galata';

import { expectStatus, lastLogPanel, openComputePanel } from './helpers';

test.use({ viewport: { width: 1440, height: 900 } });

/** The README's screenshots: the Compute panel and a finished job's log, light and dark. */
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
