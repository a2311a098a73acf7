/**
 * The MLflow UI tests: the same Chromium and Lab set-up as playwright.config.js, against a Lab
 * of their own (port 8890) that tracks jobs in a real MLflow tracking server started here
 * (SQLite backend store, artifacts in a temporary folder). Kept apart so the other UI tests
 * run without a tracking server, as most users do.
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const base = require('./playwright.config.js');

const MLFLOW_PORT = 5055;
const LAB_PORT = 8890;
const mlflowDir = fs.mkdtempSync(path.join(os.tmpdir(), 'j2c-ui-mlflow-'));

module.exports = {
  ...base,
  testDir: './tracking-tests',
  use: { ...base.use, baseURL: `http://localhost:${LAB_PORT}` },
  webServer: [
    {
      command:
        `mlflow server --backend-store-uri sqlite:///${mlflowDir}/mlflow.db ` +
        `--artifacts-destination ${mlflowDir}/artifacts ` +
        `--host 127.0.0.1 --port ${MLFLOW_PORT} --workers 1`,
      url: `http://127.0.0.1:${MLFLOW_PORT}/health`,
      timeout: 180 * 1000,
      reuseExistingServer: false,
      env: { MLFLOW_SERVER_ENABLE_JOB_EXECUTION: 'false' }
    },
    {
      command: `jupyter lab --config jupyter_server_test_config.py --port ${LAB_PORT}`,
      url: `http://localhost:${LAB_PORT}/lab`,
      timeout: 120 * 1000,
      reuseExistingServer: false,
      env: {
        J2C_MLFLOW__TRACKING_URI: `http://127.0.0.1:${MLFLOW_PORT}`,
        J2C_MLFLOW__EXPERIMENT: 'ui-tests'
      }
    }
  ]
};
