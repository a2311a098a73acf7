import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';

import {
  countLines,
  diaryLines,
  expectEveryEpochOnce,
  expectStatus,
  lastLogPanel,
  logText,
  openComputePanel,
  sendFromForm
} from './helpers';

/** The example project (ui-tests/jupyter_server_test_config.py copies it into the root). */
const PROJECT = 'digits';

/** A job whose outputs hold a notebook (what a notebook entry point leaves there), written by
 * a plain script: the UI tests' venv has no nbclient to execute a real one. */
const REPORT = 'report-job/report.py';
const WRITES_NOTEBOOK = `import json, os
cell = {"cell_type": "markdown", "id": "c1", "metadata": {}, "source": ["# Report"]}
notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
with open(os.path.join(os.environ["J2C_OUTPUT_DIR"], "report.ipynb"), "w") as f:
    json.dump(notebook, f)
print("report written")
`;

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

  test("the project's venv comes before a notebook kernel's venv elsewhere in the root", async ({
    page
  }) => {
    await page.goto();
    // The served explore.ipynb asks for the kernel `digits-env` (see the server config).
    await page.notebook.openByPath(`${PROJECT}/explore.ipynb`);
    await expect(
      page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    ).toBeVisible({ timeout: 60000 });
    const panel = await openComputePanel(page);
    await expect(panel.getByLabel('Entry point', { exact: true })).toHaveValue(
      'explore.ipynb'
    );
    await expect(
      panel.getByLabel('Virtual environment', { exact: true })
    ).toHaveValue(`${PROJECT}/.venv`);
    await expect(
      panel.locator('[data-field="venv"] .j2c-Field-hint')
    ).toHaveText(`the project's venv ${PROJECT}/.venv`);
  });

  test("a notebook's kernel in a venv inside the root is the venv of a project without one", async ({
    page
  }) => {
    const notebook = `kernel-project/analysis.ipynb`;
    await page.contents.uploadContent(
      JSON.stringify({
        cells: [],
        metadata: {
          kernelspec: {
            display_name: 'digits-env',
            language: 'python',
            name: 'digits-env'
          }
        },
        nbformat: 4,
        nbformat_minor: 5
      }),
      'text',
      notebook
    );
    await page.goto();
    await page.notebook.openByPath(notebook);
    const panel = await openComputePanel(page);
    await expect(
      panel.getByLabel('Virtual environment', { exact: true })
    ).toHaveValue('envs/digits-env', { timeout: 60000 });
    await expect(panel.getByLabel('Entry point', { exact: true })).toHaveValue(
      'analysis.ipynb'
    );
    await expect(
      panel.locator('[data-field="venv"] .j2c-Field-hint')
    ).toHaveText("the notebook kernel's venv envs/digits-env");
    await page.contents.deleteDirectory('kernel-project');
  });

  test('a project without a venv proposes none, and says so', async ({
    page
  }) => {
    const refused: string[] = [];
    page.on('response', response => {
      if (/\/j2c\/api\/(preflight|jobs)$/.test(response.url())) {
        if (response.status() >= 400) {
          refused.push(`${response.status()} ${response.url()}`);
        }
      }
    });
    await page.contents.uploadContent(
      'print("no venv here")\n',
      'text',
      'plain-project/run.py'
    );
    await page.goto();
    await page.filebrowser.open('plain-project/run.py');
    const panel = await openComputePanel(page);
    const venv = panel.getByLabel('Virtual environment', { exact: true });
    const hint = panel.locator('[data-field="venv"] .j2c-Field-hint');
    await expect(
      panel.getByLabel('Project folder', { exact: true })
    ).toHaveValue('plain-project');
    await expect(hint).toContainText('no venv');
    await expect(venv).toHaveValue('');
    await expect(
      panel.locator('.j2c-Preflight [data-layer="code"]')
    ).toBeVisible({ timeout: 30000 });

    // Typing another project takes that project's venv by the same rule.
    await panel.getByLabel('Project folder', { exact: true }).fill(PROJECT);
    await panel.getByLabel('Entry point', { exact: true }).fill('train.py');
    await expect(venv).toHaveValue(`${PROJECT}/.venv`, { timeout: 10000 });
    await panel
      .getByLabel('Project folder', { exact: true })
      .fill('plain-project');
    await panel.getByLabel('Entry point', { exact: true }).fill('run.py');
    await panel.getByRole('button', { name: 'Send to Compute' }).click();
    const { panel: log, jobId } = await lastLogPanel(page);
    await expectStatus(log, 'succeeded');
    expect(await logText(page, jobId)).toContain('no venv here');
    await expect(venv).toHaveValue('');
    // No request went out with a venv that does not exist.
    expect(refused).toEqual([]);
    await page.contents.deleteDirectory('plain-project');
  });

  test("a notebook's kernel outside the root leaves the project's .venv", async ({
    page
  }) => {
    await page.goto();
    const notebook = {
      cells: [],
      metadata: {
        kernelspec: {
          display_name: 'Python 3 (ipykernel)',
          language: 'python',
          name: 'python3'
        }
      },
      nbformat: 4,
      nbformat_minor: 5
    };
    await page.contents.uploadContent(
      JSON.stringify(notebook),
      'text',
      `${PROJECT}/default-kernel.ipynb`
    );
    await page.notebook.openByPath(`${PROJECT}/default-kernel.ipynb`);
    await expect(
      page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    ).toBeVisible({ timeout: 60000 });
    const panel = await openComputePanel(page);
    await expect(panel.getByLabel('Entry point', { exact: true })).toHaveValue(
      'default-kernel.ipynb'
    );
    // The kernel answered (idle); give the form the time it would take to take its venv.
    await page.waitForTimeout(3000);
    await expect(
      panel.getByLabel('Virtual environment', { exact: true })
    ).toHaveValue(`${PROJECT}/.venv`);
    await page.contents.deleteFile(`${PROJECT}/default-kernel.ipynb`);
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
    await expect(
      page.locator('.Toastify__toast').filter({ hasText: 'succeeded' })
    ).toBeVisible();
    await expect(panel.locator('[data-step="running"]')).toHaveAttribute(
      'data-state',
      'finished'
    );
    await expect(
      page.locator(`#j2c-compute-sidebar .j2c-Job[data-job-id="${jobId}"]`)
    ).toHaveAttribute('data-status', 'succeeded', { timeout: 30000 });
  });

  test('the file browser context menu sends a script', async ({ page }) => {
    await page.goto();
    await page.filebrowser.openDirectory(PROJECT);
    await page
      .getByRole('region', { name: 'File Browser Section' })
      .getByRole('listitem', { name: /^Name: train\.py/ })
      .click({ button: 'right' });
    await page.getByRole('menuitem', { name: 'Send to Compute' }).click();
    const { panel } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
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
    expectEveryEpochOnce(text, EPOCHS);
  });

  test('a dropped connection resumes the log with no line lost or twice', async ({
    page
  }) => {
    const EPOCHS = 40;
    let drops = 0;
    // Between the page and the server: close the stream twice, after 15 events each time.
    await page.routeWebSocket(/\/j2c\/api\/jobs\/[^/]+\/stream/, ws => {
      const server = ws.connectToServer();
      let forwarded = 0;
      server.onMessage(message => {
        ws.send(message);
        forwarded += 1;
        if (forwarded === 15 && drops < 2) {
          drops += 1;
          void ws.close();
          void server.close();
        }
      });
    });
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: `--epochs ${EPOCHS} --sleep 0.05`
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    expect(drops).toBe(2);
    const text = await logText(page, jobId);
    expectEveryEpochOnce(text, EPOCHS);
    // j2c's own lines came once each too, into the diary (none into the output).
    expect(text).not.toMatch(/^(\[j2c\]|j2c:) /m);
    const ended = (await diaryLines(panel, 'results')).filter(line =>
      line.startsWith('succeeded')
    );
    expect(ended).toHaveLength(1);
  });

  test('sending again marks the reused stages with their reason', async ({
    page
  }) => {
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: '--epochs 1'
    });
    await expectStatus((await lastLogPanel(page)).panel, 'succeeded');
    await sendFromForm(page, { Arguments: '--epochs 2' });
    const panel = page.locator('.j2c-LogWidget').last();
    await expect(panel.locator('[data-j2c="status"]')).toHaveText('succeeded', {
      timeout: 90000
    });
    const pack = panel.locator('[data-step="pack"]');
    await expect(pack).toHaveAttribute('data-state', 'reused');
    await expect(pack.locator('.j2c-Step-detail')).toContainText('unchanged');
    await expect(panel.locator('[data-step="upload"]')).toHaveAttribute(
      'data-state',
      'reused'
    );
  });

  test('unsaved project files are saved when the user asks before sending', async ({
    page
  }) => {
    await page.goto();
    await page.filebrowser.open(`${PROJECT}/digits/data.py`);
    const editor = page.getByRole('main').locator('.jp-FileEditor .cm-content');
    await editor.click();
    await page.keyboard.press('Control+End');
    await page.keyboard.type('\n# tuned for the cluster\n');
    await expect(
      page.getByRole('main').getByRole('tab', { name: /data\.py/ })
    ).toHaveClass(/jp-mod-dirty/);
    await page.filebrowser.open(`${PROJECT}/train.py`);
    await page
      .getByRole('main')
      .locator('.j2c-SendButton:visible')
      .first()
      .click();

    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('data.py');
    await dialog.getByRole('button', { name: 'Save and send' }).click();
    const { panel } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    const saved = await (
      await page.request.get(
        `/api/contents/${PROJECT}/digits/data.py?content=1`
      )
    ).json();
    expect(saved.content).toContain('# tuned for the cluster');
  });

  test('an artifact link downloads the file from the server', async ({
    page
  }) => {
    await page.goto();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      Arguments: '--epochs 4'
    });
    const { panel } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    const link = panel.getByRole('link', { name: 'metrics.json' });
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      link.click()
    ]);
    expect(download.suggestedFilename()).toBe('metrics.json');
    const saved = await download.path();
    const metrics = JSON.parse(fs.readFileSync(saved, 'utf-8'));
    expect(metrics.history).toHaveLength(4);
  });

  test('"Open executed notebook" copies it into the project and opens it', async ({
    page
  }) => {
    await page.goto();
    await page.contents.uploadContent(WRITES_NOTEBOOK, 'text', REPORT);
    await sendFromForm(page, {
      'Project folder': 'report-job',
      'Entry point': 'report.py',
      Arguments: ''
    });
    const { panel, jobId } = await lastLogPanel(page);
    await expectStatus(panel, 'succeeded');
    await panel.getByRole('button', { name: 'Open executed notebook' }).click();
    await expect(
      page.getByRole('main').getByRole('tab', { name: 'report.ipynb' })
    ).toBeVisible({ timeout: 30000 });
    expect(
      await page.contents.fileExists(
        `report-job/j2c-outputs/${jobId}/report.ipynb`
      )
    ).toBe(true);
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
