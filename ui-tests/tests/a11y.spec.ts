/**
 * Accessibility: an axe-core scan of the Compute panel (form, preflight, jobs list) and of an
 * open log panel finds no serious or critical violation; with `screenReaderMode` on, the log's
 * lines are in the accessibility tree; the polite live region announces the job's end.
 */
import AxeBuilder from '@axe-core/playwright';
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { expectStatus, lastLogPanel, openComputePanel } from './helpers';

const PROJECT = 'a11y-job';

/** A quick job with known lines (through REST, as the form sends it). */
async function sendQuickJob(
  page: IJupyterLabPageFixture,
  lines: number
): Promise<string> {
  await page.contents.uploadContent(
    `for i in range(${lines}):\n    print(f"a11y line {i}")\n`,
    'text',
    `${PROJECT}/hello.py`
  );
  const answer = await page.request.post('/j2c/api/jobs', {
    data: {
      code_path: PROJECT,
      call_path: 'hello.py',
      venv_path: null,
      name: 'a11y-hello',
      new: true
    }
  });
  expect(answer.ok(), await answer.text()).toBe(true);
  return ((await answer.json()) as { id: string }).id;
}

async function openLog(
  page: IJupyterLabPageFixture,
  id: string
): Promise<Locator> {
  await page.evaluate(
    jobId =>
      (
        window as unknown as {
          jupyterapp: {
            commands: { execute(id: string, args: unknown): Promise<unknown> };
          };
        }
      ).jupyterapp.commands
        .execute('j2c:open-log', { id: jobId })
        .then(() => undefined),
    id
  );
  const { panel } = await lastLogPanel(page);
  return panel;
}

interface IFinding {
  id: string;
  impact: string | null | undefined;
  nodes: number;
  targets: string[];
}

/** Axe's violations inside `selector`, worst first, in a form a failure message shows well. */
async function scan(
  page: IJupyterLabPageFixture,
  selector: string
): Promise<IFinding[]> {
  const results = await new AxeBuilder({ page }).include(selector).analyze();
  return results.violations.map(violation => ({
    id: violation.id,
    impact: violation.impact,
    nodes: violation.nodes.length,
    targets: violation.nodes
      .slice(0, 4)
      .map(node => `${node.target.join(' ')}: ${node.failureSummary ?? ''}`)
  }));
}

function serious(findings: IFinding[]): IFinding[] {
  return findings.filter(
    finding => finding.impact === 'serious' || finding.impact === 'critical'
  );
}

test('axe finds no serious or critical violation in the Compute panel and a log panel', async ({
  page
}) => {
  await page.goto();
  await page.filebrowser.open('digits/train.py');
  const sidebar = await openComputePanel(page);
  await expect(
    sidebar.locator('.j2c-Preflight [data-layer="venv"]')
  ).toBeVisible({ timeout: 30000 });
  const id = await sendQuickJob(page, 5);
  await expect(sidebar.locator(`li[data-job-id="${id}"]`)).toBeVisible({
    timeout: 30000
  });

  const panelFindings = await scan(page, '#j2c-compute-sidebar');
  const log = await openLog(page, id);
  await expectStatus(log, 'succeeded');
  const logFindings = await scan(page, '.j2c-LogWidget');
  console.log(
    `axe: Compute panel ${JSON.stringify(panelFindings)}; log panel ${JSON.stringify(logFindings)}`
  );
  expect(serious(panelFindings), 'Compute panel').toEqual([]);
  expect(serious(logFindings), 'log panel').toEqual([]);
});

/** How the job ended, whichever way: these tests are about what the user is told. */
async function expectEnded(log: Locator): Promise<void> {
  await expect(log.locator('[data-j2c="status"]')).toHaveText(
    /succeeded|failed|lost|cancelled/,
    { timeout: 90000 }
  );
}

test('the live region says the status, the end once, and caps the output it reads', async ({
  page
}) => {
  await page.goto();
  const id = await sendQuickJob(page, 60);
  const log = await openLog(page, id);
  await expectStatus(log, 'succeeded');
  const region = log.locator('[role="log"][aria-live="polite"]');
  await expect(region).toHaveAttribute('aria-label', 'Job announcements');
  const end = region.locator('[data-kind="end"]');
  await expect(end).toHaveCount(1);
  await expect(end).toHaveText(
    /^Job a11y-hello succeeded, exit code 0, after \d/
  );
  await expect(region.locator('[data-kind="status"]').first()).toBeAttached();
  // Every line is either read or counted in an "N more lines", and at most ten per window.
  const said = await region.locator('[data-kind="line"]').allTextContents();
  const more = await region.locator('[data-kind="more"]').allTextContents();
  const counted = more
    .map(text => Number(/^(\d+) more lines?$/.exec(text)?.[1] ?? NaN))
    .reduce((a, b) => a + b, 0);
  // The job's own lines, as the server has them: its 60 (the runner's, j2c's, are not read
  // out for a job that succeeds).
  const events = (await (
    await page.request.get(`/j2c/api/jobs/${id}/events?after=0&limit=5000`)
  ).json()) as { kind: string; text?: string; origin?: string }[];
  const logTexts = events
    .filter(
      event =>
        event.kind === 'log' &&
        event.origin !== 'j2c' &&
        (event.text ?? '').trim()
    )
    .map(event => (event.text ?? '').trim());
  expect(logTexts).toEqual(
    Array.from({ length: 60 }, (_, i) => `a11y line ${i}`)
  );
  expect(said.length + counted).toBe(60);
  expect(said.length).toBeLessThanOrEqual(10 * (more.length + 1));
  expect(more.length).toBeGreaterThan(0);
  // The lines read are the job's, in order, from its first.
  const positions = said.map(line => logTexts.indexOf(line.trim()));
  expect(positions[0]).toBe(0);
  expect(positions.every((at, i) => at > (i ? positions[i - 1] : -1))).toBe(
    true
  );
  // Nothing was said twice: the end came after the counts, once.
  await page.waitForTimeout(500);
  await expect(end).toHaveCount(1);
});

test.describe('with screen-reader mode on', () => {
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      'j2c:plugin': { screenReaderMode: true }
    }
  });

  test("the log's lines are in the accessibility tree", async ({ page }) => {
    await page.goto();
    const id = await sendQuickJob(page, 5);
    const log = await openLog(page, id);
    await expectEnded(log);
    const rows = log.locator('.xterm-accessibility-tree');
    await expect(rows).toBeAttached();
    await expect
      .poll(() => rows.ariaSnapshot(), { timeout: 10000 })
      .toContain('listitem: a11y line 4');
    const tree = await rows.ariaSnapshot();
    for (let i = 0; i < 5; i++) {
      expect(tree).toContain(`listitem: a11y line ${i}`);
    }
    // xterm's own (assertive) live region is quiet: the panel's polite one speaks.
    await expect(log.locator('.xterm .live-region')).toHaveAttribute(
      'aria-live',
      'off'
    );
    const findings = await scan(page, '.j2c-LogWidget');
    expect(serious(findings), 'log panel in screen-reader mode').toEqual([]);
  });
});

test('without screen-reader mode xterm keeps no accessibility tree', async ({
  page
}) => {
  await page.goto();
  const id = await sendQuickJob(page, 2);
  const log = await openLog(page, id);
  await expectEnded(log);
  await expect(log.locator('.xterm-accessibility-tree')).toHaveCount(0);
});

test('the log toolbar and the jobs list work from the keyboard', async ({
  page
}) => {
  await page.goto();
  const id = await sendQuickJob(page, 3);
  const sidebar = await openComputePanel(page);
  const row = sidebar.locator(`li[data-job-id="${id}"]`);
  await expect(row).toBeVisible({ timeout: 30000 });
  // The job's name is a button: Enter opens its log.
  await row.locator('.j2c-Job-name').focus();
  await page.keyboard.press('Enter');
  const { panel: log } = await lastLogPanel(page);
  await expectEnded(log);
  const follow = log.getByRole('button', { name: 'Follow' });
  await expect(follow).toHaveAttribute('aria-pressed', 'true');
  await follow.focus();
  await expect(follow).toBeFocused();
  const outline = await follow.evaluate(
    node => getComputedStyle(node).outlineStyle
  );
  expect(outline).not.toBe('none');
  await page.keyboard.press('Space');
  await expect(follow).toHaveAttribute('aria-pressed', 'false');
  // The toolbar is one tab stop; arrows move through its named controls (JupyterLab's
  // toolbar pattern): search, copy, download; cancel is disabled once the job ended.
  await page.keyboard.press('ArrowRight');
  await expect(
    log.getByRole('searchbox', { name: 'Search the log' })
  ).toBeFocused();
  await page.keyboard.press('ArrowRight');
  await expect(log.getByRole('button', { name: 'Copy' })).toBeFocused();
  await page.keyboard.press('ArrowRight');
  await expect(log.getByRole('button', { name: 'Download' })).toBeFocused();
  await expect(log.getByRole('button', { name: 'Cancel' })).toBeDisabled();
});
