/**
 * Galata's Playwright configuration, run against Debian's Chromium: Playwright cannot
 * download its own browsers here, so the executable is found at run time. The Lab listens on
 * port 8888, or on `UI_TESTS_PORT` (not a `J2C_` name: those are j2c settings), so that two checkouts can run their UI tests at once.
 */
const { execSync } = require('child_process');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

function chromiumPath() {
  if (process.env.CHROMIUM_PATH) {
    return process.env.CHROMIUM_PATH;
  }
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execSync(`command -v ${name}`, { shell: '/bin/sh' })
        .toString()
        .trim();
    } catch {
      // try the next name
    }
  }
  throw new Error('No Chromium found: install Debian\'s "chromium" package');
}

const PORT = Number(process.env.UI_TESTS_PORT || 8888);

module.exports = {
  ...baseConfig,
  testDir: './tests',
  timeout: 120000,
  workers: 1,
  retries: 0,
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    ...baseConfig.use,
    baseURL: `http://localhost:${PORT}`,
    video: 'off',
    trace: 'off',
    launchOptions: {
      executablePath: chromiumPath(),
      args: [
        '--no-sandbox',
        '--headless',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--no-first-run',
        '--disable-sync',
        '--disable-quic'
      ]
    }
  },
  webServer: {
    command: `jlpm start --port ${PORT}`,
    url: `http://localhost:${PORT}/lab`,
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI
  }
};
