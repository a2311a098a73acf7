/**
 * Galata's Playwright configuration, run against Debian's Chromium: Playwright cannot
 * download its own browsers here, so the executable is found at run time.
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

module.exports = {
  ...baseConfig,
  testDir: './tests',
  timeout: 120000,
  workers: 1,
  retries: 0,
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    ...baseConfig.use,
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
    command: 'jlpm start',
    url: 'http://localhost:8888/lab',
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI
  }
};
