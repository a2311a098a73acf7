/**
 * Why a job failed, for the top of its log panel: the reason in one sentence, what to do, and
 * the line it came from. The server's failure summary when the record has one; otherwise what
 * the events say (the failed step's words, the exit code and the job's last error line).
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { JobRecord } from '../models';
import { flagsInFormWords } from '../sidebar/labels';
import { JobProgress, StepName } from './progress';

export interface IFailure {
  reason: string;
  /** What to do about it ('' when nothing specific is known). */
  action: string;
  /** The line it came from ('' when none). */
  line: string;
  /** The timeline step that failed, if one did. */
  step: StepName | null;
}

/** The statuses that are a failure (a cancel is the user's own doing). */
const FAILED = new Set(['failed', 'lost']);

export function failureOf(
  record: JobRecord | null,
  progress: JobProgress,
  lastErrorLine: string,
  trans: TranslationBundle
): IFailure | null {
  const status = progress.status ?? record?.status ?? null;
  if (!status || !FAILED.has(status)) {
    return null;
  }
  const failed = progress.steps.find(step => step.state === 'failed');
  const step = failed?.name ?? null;
  // The server's own summary, in the user's words, when it could tell.
  const told = record?.failure;
  if (told) {
    return {
      reason: told.reason,
      action: flagsInFormWords(told.action ?? '', trans),
      line: told.line ?? '',
      step: step ?? 'running'
    };
  }
  const exitCode = record?.exit_code ?? progress.exitCode;
  if (step === 'running' || (step === null && typeof exitCode === 'number')) {
    return {
      reason:
        typeof exitCode === 'number'
          ? trans.__('The job exited with code %1.', exitCode)
          : failed?.detail || progress.message || trans.__('The job failed.'),
      action: lastErrorLine
        ? trans.__(
            'The line below is the last the job wrote before it ended; its whole output is in the log.'
          )
        : '',
      line: lastErrorLine,
      step: step ?? 'running'
    };
  }
  return {
    reason:
      failed?.detail ||
      progress.errors[progress.errors.length - 1] ||
      progress.message ||
      trans.__('The job failed.'),
    action: '',
    line: '',
    step
  };
}
