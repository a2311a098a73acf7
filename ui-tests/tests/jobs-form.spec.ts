/**
 * The experiment first, in the Compute panel (issue 46): form errors beside the Send button and
 * in a toast, in the form's own words; resource fields the scheduler cannot honour disabled
 * and never sent; job rows that tell runs apart (arguments, short id) with a filter; "Run
 * again…" filling the form from a job; "Remove" asking first; outputs opened in the file
 * browser; one notification per sweep.
 */
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import type { JobRecord } from '../../src/models';
import {
  expectStatus,
  lastLogPanel,
  logText,
  openComputePanel,
  sendFromForm
} from './helpers';

const PROJECT = 'digits';

test.use({ viewport: { width: 1440, height: 900 } });

async function record(
  page: IJupyterLabPageFixture,
  id: string
): Promise<JobRecord> {
  const answer = await page.request.get(`/j2c/api/jobs/${id}`);
  expect(answer.ok(), await answer.text()).toBe(true);
  return (await answer.json()) as JobRecord;
}

function toasts(page: IJupyterLabPageFixture, text: string | RegExp): Locator {
  return page.locator('.Toastify__toast').filter({ hasText: text });
}

/** The row of job `id` in the jobs list. */
function row(panel: Locator, id: string): Locator {
  return panel.locator(`.j2c-Job[data-job-id="${id}"]`);
}

test("a bad entry point: the error beside Send and in a toast, in the form's words", async ({
  page
}) => {
  await page.goto();
  const before = (
    (await (await page.request.get('/j2c/api/jobs')).json()) as []
  ).length;
  await sendFromForm(page, {
    'Project folder': PROJECT,
    'Entry point': 'nope.py'
  });
  const panel = await openComputePanel(page);
  const problems = panel.locator('[data-j2c="form-problems"]');
  await expect(problems).toHaveText("Entry point: 'nope.py' is not a file");
  await expect(problems).toHaveAttribute('role', 'alert');
  // Beside the Send button: right above it, in view with it.
  const send = panel.getByRole('button', { name: 'Send to Compute' });
  const [box, button] = [
    await problems.boundingBox(),
    await send.boundingBox()
  ];
  expect(box && button && button.y - (box.y + box.height)).toBeLessThan(20);
  await expect(problems).toBeInViewport();
  // The toast says the same; nothing anywhere says the server's name of the field.
  const toast = toasts(page, 'Not sent');
  await expect(toast).toHaveText(
    /Not sent: Entry point: 'nope\.py' is not a file/
  );
  const field = panel.locator('[data-field="entry"]');
  await expect(field.locator('.j2c-Field-error')).toHaveText(
    "'nope.py' is not a file"
  );
  for (const text of [
    await problems.textContent(),
    await toast.textContent(),
    await field.textContent()
  ]) {
    expect(text).not.toContain('call_path');
  }
  // The label in the summary brings the field into focus.
  await problems.getByRole('button', { name: 'Entry point' }).click();
  await expect(panel.getByLabel('Entry point', { exact: true })).toBeFocused();
  const after = ((await (await page.request.get('/j2c/api/jobs')).json()) as [])
    .length;
  expect(after).toBe(before);
});

test('an import nothing provides: named by Check, the Advanced checkbox sends anyway', async ({
  page
}) => {
  // This lab's jobs run on its own Python (the local scheduler: no image report), so the
  // preflight's answer gets the report of an image target, as a remote scheduler's would be
  // (the server's check and refusal: tests/image/test_first_send_imports.py, real podman).
  test.setTimeout(180000);
  await page.route(/\/j2c\/api\/preflight(\?|$)/, async route => {
    const response = await route.fetch();
    const plan = await response.json();
    const report = {
      target: 'image registry.example/train:1',
      key: 'image:registry.example/train:1',
      known: true,
      unprovided: [{ name: 'tiktoken', imported_by: ['train.py'] }]
    };
    await route.fulfill({ response, json: { ...plan, image_report: report } });
  });
  const sent: Array<Record<string, unknown>> = [];
  await page.route(/\/j2c\/api\/jobs(\?|$)/, async route => {
    if (route.request().method() === 'POST') {
      sent.push(route.request().postDataJSON());
    }
    await route.continue();
  });
  await page.goto();
  await page.filebrowser.open(`${PROJECT}/train.py`);
  const panel = await openComputePanel(page);
  await panel.getByRole('button', { name: 'Check' }).click();
  const refused = panel.locator('.j2c-Preflight-image .j2c-Preflight-refused');
  await expect(refused).toContainText(
    'train.py imports tiktoken: not in the venv, the lab or the image',
    { timeout: 30000 }
  );
  await expect(refused).toContainText(
    'Not sent unless "Send even if imports are missing" (Advanced) is ticked'
  );
  // The checkbox the words name is there, and what it sends is the request's field.
  await panel.getByText('Advanced', { exact: true }).click();
  await panel.getByLabel('Send even if imports are missing').check();
  await panel.getByRole('button', { name: 'Send to Compute' }).click();
  const { panel: log, jobId } = await lastLogPanel(page);
  await expectStatus(log, 'succeeded', 120000);
  expect(sent.length).toBeGreaterThan(0);
  expect(sent[sent.length - 1].allow_missing_imports).toBe(true);
  expect((await record(page, jobId)).request.allow_missing_imports).toBe(true);
});

test.describe('with CPU and memory defaults the local scheduler cannot honour', () => {
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      'j2c:plugin': { defaultCpus: 2, defaultMemory: '4Gi' }
    }
  });

  test('they are disabled with the reason, and the job goes without them', async ({
    page
  }) => {
    await page.goto();
    const panel = await openComputePanel(page);
    for (const [label, reason] of [
      ['CPUs', 'The local scheduler cannot give a job a number of CPU cores.'],
      ['Memory', 'The local scheduler cannot give a job an amount of memory.']
    ]) {
      const input = panel.getByLabel(label, { exact: true });
      await expect(input).toBeDisabled();
      await expect(input).toHaveAttribute('title', new RegExp(reason));
      await expect(input).toHaveValue('');
      await expect(
        panel.locator(`[data-field="${label === 'CPUs' ? 'cpus' : 'memory'}"]`)
      ).toHaveAttribute('title', /This field is not sent\./);
    }
    // What the local scheduler honours stays on: GPUs, nodes, the time limit.
    await expect(panel.getByLabel('GPUs', { exact: true })).toBeEnabled();
    await expect(panel.getByLabel('Nodes', { exact: true })).toBeEnabled();
    await sendFromForm(page, {
      'Project folder': PROJECT,
      'Entry point': 'train.py',
      'Time limit (min)': '5',
      Arguments: '--epochs 1'
    });
    const { panel: log, jobId } = await lastLogPanel(page);
    await expectStatus(log, 'succeeded');
    const resources = (await record(page, jobId)).request.resources ?? {};
    expect(resources.cpus ?? null).toBeNull();
    expect(resources.memory ?? null).toBeNull();
    expect(resources.time_limit_minutes).toBe(5);
  });
});

test('job rows tell runs apart, filter, run again from the form, remove after asking, show outputs', async ({
  page
}) => {
  test.setTimeout(240000);
  await page.goto();
  await sendFromForm(page, {
    'Project folder': PROJECT,
    'Entry point': 'train.py',
    Arguments: '--epochs 2 --samples 300'
  });
  const first = await lastLogPanel(page);
  await expectStatus(first.panel, 'succeeded');
  const short = first.jobId.split('-').pop() ?? '';
  const panel = await openComputePanel(page);
  const firstRow = row(panel, first.jobId);
  await expect(firstRow).toHaveAttribute('data-status', 'succeeded', {
    timeout: 30000
  });
  await expect(firstRow.locator('.j2c-Job-name')).toHaveText('train.py');
  await expect(firstRow.locator('[data-j2c="job-args"]')).toHaveText(
    '--epochs 2 --samples 300'
  );
  await expect(firstRow.locator('[data-j2c="short-id"]')).toHaveText(short);
  // The log's tab says which run it is too.
  await expect(
    page.getByRole('main').getByRole('tab', { name: `train.py ${short}` })
  ).toBeVisible();

  // "Run again…": the form holds the job's settings, the focus in Arguments.
  await firstRow.getByRole('button', { name: 'Run again…' }).click();
  const args = panel.getByLabel('Arguments', { exact: true });
  await expect(args).toHaveValue('--epochs 2 --samples 300');
  await expect(args).toBeFocused();
  await expect(panel.getByLabel('Project folder', { exact: true })).toHaveValue(
    PROJECT
  );
  await expect(panel.getByLabel('Entry point', { exact: true })).toHaveValue(
    'train.py'
  );
  await expect(
    panel.getByLabel('Virtual environment', { exact: true })
  ).toHaveValue(`${PROJECT}/.venv`);
  await expect(panel.locator('[data-j2c="rerun-note"]')).toContainText(
    `Filled from job train.py (${short})`
  );
  await args.fill('--epochs 3 --samples 250');
  await panel.getByRole('button', { name: 'Send to Compute' }).click();
  await expect(page.locator('.j2c-LogWidget')).toHaveCount(2);
  const second = await lastLogPanel(page);
  expect(second.jobId).not.toBe(first.jobId);
  await expectStatus(second.panel, 'succeeded');
  expect((await record(page, second.jobId)).request.args).toEqual([
    '--epochs',
    '3',
    '--samples',
    '250'
  ]);
  expect(await logText(page, second.jobId)).toContain('epoch 3/3');
  await expect(panel.locator('[data-j2c="rerun-note"]')).toHaveCount(0);

  // The filter: the short id finds one run, arguments find theirs, nonsense finds none.
  const filter = panel.getByLabel('Filter jobs');
  await filter.fill(short);
  await expect(panel.locator('.j2c-Job')).toHaveCount(1);
  await expect(firstRow).toBeVisible();
  await filter.fill('samples 250');
  await expect(row(panel, second.jobId)).toBeVisible();
  await expect(firstRow).toHaveCount(0);
  await filter.fill('no-such-run-xyz');
  await expect(panel.locator('.j2c-Job')).toHaveCount(0);
  await expect(panel.locator('.j2c-Jobs-empty')).toHaveText(
    'No job matches "no-such-run-xyz".'
  );
  await filter.fill('');

  // Outputs: copied next to the project and shown in the file browser.
  await firstRow
    .getByRole('button', { name: 'Show outputs in the file browser' })
    .click();
  await expect(
    page.locator('.jp-DirListing-item[title*="metrics.json"]')
  ).toBeVisible({ timeout: 30000 });
  expect(
    await page.contents.fileExists(
      `${PROJECT}/j2c-outputs/${first.jobId}/metrics.json`
    )
  ).toBe(true);
  await openComputePanel(page);

  // Remove asks first: Cancel keeps the record, Remove forgets it.
  await firstRow.getByRole('button', { name: 'Remove record…' }).click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Remove job train.py?');
  await expect(dialog).toContainText(short);
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toHaveCount(0);
  await expect(firstRow).toBeVisible();
  expect(
    (await page.request.get(`/j2c/api/jobs/${first.jobId}`)).status()
  ).toBe(200);
  await firstRow.getByRole('button', { name: 'Remove record…' }).click();
  await dialog.getByRole('button', { name: 'Remove' }).click();
  await expect(firstRow).toHaveCount(0);
  expect(
    (await page.request.get(`/j2c/api/jobs/${first.jobId}`)).status()
  ).toBe(404);
});

test('a sweep raises one notification, updated in place, with its outcome', async ({
  page
}) => {
  test.setTimeout(300000);
  await page.goto();
  // Every toast the page shows, by its first text: an update in place adds none.
  await page.evaluate(() => {
    const added: string[] = [];
    (window as unknown as { j2cToasts: string[] }).j2cToasts = added;
    new MutationObserver(records => {
      for (const record of records) {
        record.addedNodes.forEach(node => {
          if (node instanceof Element) {
            const toasts = node.matches('.Toastify__toast')
              ? [node]
              : [...node.querySelectorAll('.Toastify__toast')];
            toasts.forEach(toast => added.push(toast.textContent ?? ''));
          }
        });
      }
    }).observe(document.body, { childList: true, subtree: true });
  });
  // Sent from the form's Sweep section, as a user does (the list then follows it at once).
  const panel = await openComputePanel(page);
  for (const [label, value] of Object.entries({
    'Project folder': PROJECT,
    'Entry point': 'train.py',
    'Virtual environment': `${PROJECT}/.venv`,
    Arguments: '--epochs 2 --samples 300 --lr {lr} --seed {seed}'
  })) {
    await panel.getByLabel(label, { exact: true }).fill(value);
  }
  const section = panel.locator('[data-j2c="sweep-section"]');
  await section.locator('summary').click();
  for (const [name, values] of [
    ['lr', '0.5, 0.05, 0.005'],
    ['seed', '0, 1']
  ]) {
    await section.getByRole('button', { name: 'Add parameter' }).click();
    await section.locator('[data-j2c="sweep-name"]').last().fill(name);
    await section.locator('[data-j2c="sweep-values"]').last().fill(values);
  }
  await section.getByLabel('Max parallel', { exact: true }).fill('3');
  await panel.getByRole('button', { name: 'Send to Compute' }).click();
  const view = page.locator('[data-j2c="sweep-view"]');
  await expect(view).toBeVisible({ timeout: 30000 });
  const id = (await view.getAttribute('data-sweep-id')) ?? '';
  const short = id.split('-').pop() ?? '';
  const toast = toasts(page, `Sweep train.py (${short})`);
  await expect(toast).toHaveText(
    /Sweep train\.py \(\w+\) succeeded: 6 of 6 succeeded; best accuracy [\d.]+ \(lr=[\d.]+, seed=\d\)/,
    { timeout: 240000 }
  );
  await expect(toast).toHaveCount(1);
  await expect(toasts(page, /^Job /)).toHaveCount(0);
  // One toast for the sweep, shown once and updated in place; none for its variants.
  const added = await page.evaluate(
    () => (window as unknown as { j2cToasts: string[] }).j2cToasts
  );
  expect(added.filter(text => text.includes('Sweep train.py'))).toHaveLength(1);
  expect(added.filter(text => /^Job /.test(text))).toEqual([]);
  await toast.getByRole('button', { name: 'Open sweep view' }).click();
  await expect(
    page.locator(`[data-j2c="sweep-view"][data-sweep-id="${id}"]`)
  ).toBeVisible();
});
