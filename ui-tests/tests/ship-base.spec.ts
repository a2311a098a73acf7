import { expect, test } from '@jupyterlab/galata';

import { openComputePanel } from './helpers';

/**
 * The preflight's image section and the ship/skip choice (issue #27 §3).
 *
 * The UI test server runs the local scheduler, whose jobs run on the lab's own Python: it has
 * no target image, so its preflight carries no image report (tests/image/ checks the real one
 * against podman and the platform image). Here the server's real preflight answer gets a report
 * added in the page, as the server sends it for an image that lacks packages; the requests the
 * form sends are the real ones, read as they leave the page.
 */
const PROJECT = 'digits';

const REPORT = {
  target: 'image registry.example/train:1',
  key: 'container-id:sha256:0',
  known: true,
  source: 'probe',
  missing: [
    {
      name: 'regex',
      lab_version: '2026.5.9',
      bytes: 3_700_000,
      needed_by: ['imported by train.py']
    }
  ],
  versions: [
    {
      name: 'numpy',
      lab_version: '2.4.6',
      image_version: '1.24.2',
      broken: [{ by: 'scipy 1.17.1', requirement: 'numpy<2.7,>=1.26.4' }]
    }
  ],
  shipping: {
    enabled: true,
    names: ['regex 2026.5.9', 'numpy 2.4.6'],
    bytes: 41_000_000,
    files: 900,
    conflicts: 'auto',
    shipped_conflicts: ['numpy 2.4.6']
  }
};

test('the preflight lists what the image lacks and the form sends the ship/skip choice', async ({
  page
}) => {
  const sent: Array<Record<string, unknown>> = [];
  await page.route(/\/j2c\/api\/preflight(\?|$)/, async route => {
    sent.push(route.request().postDataJSON());
    const response = await route.fetch();
    const plan = await response.json();
    const skipped = sent[sent.length - 1].ship_base === false;
    const shipping = skipped
      ? {
          ...REPORT.shipping,
          enabled: false,
          names: [],
          off_reason: '--no-ship-base'
        }
      : REPORT.shipping;
    await route.fulfill({
      response,
      json: { ...plan, image_report: { ...REPORT, shipping } }
    });
  });
  await page.goto();
  await page.filebrowser.open(`${PROJECT}/train.py`);
  const panel = await openComputePanel(page);
  const image = panel.locator('.j2c-Preflight-image');
  await expect(image).toBeVisible({ timeout: 30000 });
  await expect(image.locator('summary')).toHaveText(
    'image registry.example/train:1 differs from the lab'
  );
  await expect(image.locator('[data-package="regex"]')).toContainText(
    'regex 2026.5.9'
  );
  await expect(image.locator('.j2c-Preflight-shipping')).toContainText(
    "Shipping 2 packages from the lab's base Python: regex 2026.5.9, numpy 2.4.6"
  );
  await expect(image.locator('.j2c-Preflight-requirement')).toHaveText(
    'scipy 1.17.1 needs numpy<2.7,>=1.26.4'
  );

  const ship = panel.getByLabel('Lab-base packages the image lacks', {
    exact: true
  });
  await expect(ship).toHaveValue('');
  expect(sent[sent.length - 1].ship_base ?? null).toBeNull();
  await ship.selectOption('skip');
  await expect(image.locator('.j2c-Preflight-notShipped')).toContainText(
    'Not shipped (--no-ship-base)'
  );
  expect(sent[sent.length - 1].ship_base).toBe(false);

  const conflicts = panel.getByLabel('Version conflicts', { exact: true });
  await conflicts.selectOption('image');
  await expect.poll(() => sent[sent.length - 1].base_conflicts).toBe('image');
});
