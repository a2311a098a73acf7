/** What the j2c UI tests share: opening the sidebar, filling the form, reading a log panel. */
import { IJupyterLabPageFixture, expect } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

/** The shape of the page objects these helpers read (JupyterLab exposes them to tests). */
interface ILogWidget {
  id: string;
  content: { view: { text(): string } };
}
interface IPageWindow {
  jupyterapp: { shell: { widgets(area: string): Iterable<ILogWidget> } };
}

export async function openComputePanel(
  page: IJupyterLabPageFixture
): Promise<Locator> {
  const panel = page.locator('#j2c-compute-sidebar');
  if (!(await panel.isVisible())) {
    await page.getByRole('tab', { name: 'Compute' }).click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

/** Fill the form's fields by their labels (as a user would) and send. */
export async function sendFromForm(
  page: IJupyterLabPageFixture,
  fields: { [label: string]: string }
): Promise<void> {
  const panel = await openComputePanel(page);
  for (const [label, value] of Object.entries(fields)) {
    await panel.getByLabel(label, { exact: true }).fill(value);
  }
  await panel.getByRole('button', { name: 'Send to Compute' }).click();
}

/** The log panel that opened last, and its job id. */
export async function lastLogPanel(
  page: IJupyterLabPageFixture
): Promise<{ panel: Locator; jobId: string }> {
  const panel = page.locator('.j2c-LogWidget').last();
  await expect(panel).toBeVisible({ timeout: 30000 });
  const id = (await panel.getAttribute('id')) ?? '';
  return { panel, jobId: id.replace(/^j2c-log-/, '') };
}

/** Every line the log panel of `jobId` holds, as its text. */
export async function logText(
  page: IJupyterLabPageFixture,
  jobId: string
): Promise<string> {
  return page.evaluate(id => {
    const app = (window as unknown as IPageWindow).jupyterapp;
    for (const widget of app.shell.widgets('main')) {
      if (widget.id === `j2c-log-${id}`) {
        return widget.content.view.text();
      }
    }
    return '';
  }, jobId);
}

export async function expectStatus(
  panel: Locator,
  status: string,
  timeout = 90000
): Promise<void> {
  await expect(panel.locator('[data-j2c="status"]')).toHaveText(status, {
    timeout
  });
}

/** How many times `line` occurs as a whole line of `text`. */
export function countLines(text: string, pattern: RegExp): number {
  return text.split('\n').filter(line => pattern.test(line)).length;
}

/** Each `epoch N/epochs` line of the example's training log is there exactly once. */
export function expectEveryEpochOnce(text: string, epochs: number): void {
  for (let epoch = 1; epoch <= epochs; epoch++) {
    expect(
      countLines(text, new RegExp(`^epoch ${epoch}/${epochs} `)),
      `epoch ${epoch}`
    ).toBe(1);
  }
}

/** j2c's lines of one timeline step, as the log panel's diary lists them (unfolded first). */
export async function diaryLines(
  panel: Locator,
  step: string
): Promise<string[]> {
  const toggle = panel.locator('[data-j2c="diary-toggle"]');
  if ((await toggle.getAttribute('aria-expanded')) !== 'true') {
    await toggle.click();
  }
  const row = panel.locator(`[data-j2c="diary"] [data-step="${step}"]`);
  const button = row.locator('.j2c-Diary-stepButton');
  if ((await button.getAttribute('aria-expanded')) !== 'true') {
    await button.click();
  }
  return row.locator('.j2c-Diary-lines li').allTextContents();
}
