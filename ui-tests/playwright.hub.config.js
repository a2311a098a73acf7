/**
 * Playwright configuration for the JupyterHub tests (hub-tests/): a real hub started by
 * scripts/hub-up.sh under the base URL /hub-prefix/, driven through its login page. The
 * Galata tests (tests/, playwright.config.js) are not part of this run, and this run needs
 * none of Galata's fixtures: the hub's pages are not a bare JupyterLab.
 */
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');
const lab = require('./playwright.config');

// Set once in the runner; its workers inherit the environment, so they see the same hub.
if (!process.env.J2C_HUB_DIR) {
  process.env.J2C_HUB_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'j2c-hub-'));
  for (const name of [
    'J2C_HUB_PASSWORD',
    'J2C_HUB_ADMIN_TOKEN',
    'J2C_HUB_PROXY_TOKEN'
  ]) {
    process.env[name] = crypto.randomBytes(24).toString('hex');
  }
}
const port = process.env.J2C_HUB_PORT || '8765';
process.env.J2C_HUB_PORT = port;

module.exports = {
  testDir: 'hub-tests',
  outputDir: 'test-results/hub',
  timeout: 300000,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    video: 'off',
    trace: 'off',
    acceptDownloads: true,
    launchOptions: lab.use.launchOptions
  },
  webServer: {
    command: `bash ../scripts/hub-up.sh ${process.env.J2C_HUB_DIR}`,
    url: `http://127.0.0.1:${port}/hub-prefix/hub/api`,
    timeout: 180 * 1000,
    reuseExistingServer: false,
    // The hub stops the users' servers and its proxy on SIGTERM; a SIGKILL would leave them.
    gracefulShutdown: { signal: 'SIGTERM', timeout: 30000 }
  }
};
