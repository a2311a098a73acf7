import { expect, test } from '@jupyterlab/galata';

test.describe('j2c extension', () => {
  test('activates and shows the Compute panel', async ({ page }) => {
    const logs: string[] = [];
    page.on('console', message => logs.push(message.text()));

    await page.goto();
    const tab = page.getByRole('tab', { name: 'Compute' });
    await expect(tab).toBeVisible();
    await tab.click();

    const panel = page.locator('#j2c-compute-sidebar');
    await expect(panel).toBeVisible();
    await expect(panel.locator('[data-j2c="scheduler"]')).toHaveText('local');
    await expect(panel.locator('[data-j2c="storage"]')).toHaveText('file');
    await expect
      .poll(() => logs.some(l => l.includes('j2c: server extension is active')))
      .toBe(true);

    await page.screenshot({ path: 'test-results/compute-panel.png' });
  });
});
