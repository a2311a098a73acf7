/** A sent job's MLflow run, seen in the log panel's results and in the jobs list. */
import { expect, galata, test } from '@jupyterlab/galata';

import {
  expectStatus,
  lastLogPanel,
  openComputePanel,
  sendFromForm
} from '../tests/helpers';

const MLFLOW = 'http://127.0.0.1:5055/api/2.0/mlflow';

/** User code logging to the run j2c made for it, through MLflow's REST API (the job's venv
 * has no mlflow package; `mlflow.log_metric` makes these same calls). */
const LOGS_METRICS = `import json, os, time, urllib.request
def log(key, value, step):
    body = {"run_id": os.environ["MLFLOW_RUN_ID"], "key": key, "value": value,
            "timestamp": int(time.time() * 1000), "step": step}
    request = urllib.request.Request(
        os.environ["MLFLOW_TRACKING_URI"] + "/api/2.0/mlflow/runs/log-metric",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
log("val_loss", 0.5, 0)
log("val_loss", 0.25, 1)
print("logged to", os.environ["MLFLOW_RUN_ID"], flush=True)
`;

test.use({
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    'j2c:plugin': { listMetric: 'val_loss' }
  }
});

test('the results show the MLflow run, its status and the latest metric', async ({
  page
}) => {
  await page.goto();
  await page.contents.uploadContent(LOGS_METRICS, 'text', 'tracked/train.py');
  await sendFromForm(page, {
    'Project folder': 'tracked',
    'Entry point': 'train.py',
    Arguments: ''
  });
  const { panel, jobId } = await lastLogPanel(page);
  await expectStatus(panel, 'succeeded');

  const run = panel.locator('[data-j2c="mlflow-run"]');
  await expect(run).toContainText('FINISHED');
  const runId = (await run.locator('a').textContent()) ?? '';
  expect(await run.locator('a').getAttribute('href')).toContain(runId);
  await expect(
    panel.locator('[data-j2c="mlflow-metric"][data-metric="val_loss"]')
  ).toHaveText('0.2500');

  // The run is the server's, tagged with the job: not a value the UI made up.
  const answer = await page.request.get(`${MLFLOW}/runs/get?run_id=${runId}`);
  expect(answer.ok()).toBe(true);
  const info = (await answer.json()).run;
  expect(info.info.status).toBe('FINISHED');
  const tags = Object.fromEntries(
    (info.data.tags as { key: string; value: string }[]).map(t => [
      t.key,
      t.value
    ])
  );
  expect(tags['j2c.job_id']).toBe(jobId);

  // The jobs list shows the metric the user chose in the settings (mocked above).
  const sidebar = await openComputePanel(page);
  const row = sidebar.locator(`[data-job-id="${jobId}"]`);
  await expect(row.locator('[data-j2c="list-metric"]')).toHaveText(
    'val_loss 0.2500'
  );
});
