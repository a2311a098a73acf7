/**
 * "Copy all" in a job's results: a real job on the local scheduler writes its outputs where
 * scripts do, relative to its working directory (no $J2C_OUTPUT_DIR); the button copies every
 * one into `j2c-outputs/<id>/` next to the project with its relative path kept, and says what
 * it copied and what it did not, with the server's reason.
 */
import { expect, test } from '@jupyterlab/galata';

import { expectStatus, lastLogPanel, sendFromForm } from './helpers';

const PROJECT = 'copy-all-job';
const WRITES = `import os, pathlib
os.makedirs("models/best", exist_ok=True)
pathlib.Path("models/best/weights.txt").write_text("w = 0.5\\n")
pathlib.Path("metrics.json").write_text('{"loss": 0.25}\\n')
print("outputs written")
`;

test.describe('Copy all', () => {
  test('copies every output into j2c-outputs/<id>/ with its relative path', async ({
    page
  }) => {
    await page.goto();
    await page.contents.uploadContent(WRITES, 'text', `${PROJECT}/writes.py`);
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'writes.py',
      Arguments: ''
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    const results = panel.locator('[data-j2c="results"]');
    await expect(
      results.getByRole('link', { name: 'models/best/weights.txt' })
    ).toBeVisible();

    await results.getByRole('button', { name: 'Copy all to project' }).click();
    const folder = `${PROJECT}/j2c-outputs/${jobId}`;
    const outcome = results.locator('[data-j2c="copy-all-outcome"]');
    await expect(outcome.getByRole('status')).toHaveText(
      `Copied 2 files to ${folder}`
    );
    await expect(outcome.locator('[data-j2c="copied"] li')).toHaveText([
      'metrics.json',
      'models/best/weights.txt'
    ]);
    expect(
      await page.contents.fileExists(`${folder}/models/best/weights.txt`)
    ).toBe(true);
    const copied = await (
      await page.request.get(
        `/api/contents/${folder}/models/best/weights.txt?content=1&format=text`
      )
    ).json();
    expect(copied.content).toBe('w = 0.5\n');

    // A file of the user's own where a copy would go: kept, named with the reason.
    await page.contents.uploadContent(
      'mine\n',
      'text',
      `${folder}/metrics.json`
    );
    await results.getByRole('button', { name: 'Copy all to project' }).click();
    await expect(outcome.getByRole('status')).toHaveText(
      `Copied 1 file to ${folder}, 1 not copied`
    );
    await expect(outcome.locator('[data-j2c="not-copied"] li')).toHaveText(
      /^metrics\.json: .*exists with other content; not overwritten$/
    );
    const mine = await (
      await page.request.get(
        `/api/contents/${folder}/metrics.json?content=1&format=text`
      )
    ).json();
    expect(mine.content).toBe('mine\n');
  });
});
