/**
 * The Compute form's words for its fields, in one place: the form draws them as labels, and
 * every error (under its field, beside the Send button, in the toast) names the field by them,
 * never by the server's name for it (`call_path`).
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { ErrorKey, FormField, ResourceField } from './values';

export type FieldLabels = {
  [key in FormField | 'sweep' | 'allowMissingImports']: string;
};

export function fieldLabels(trans: TranslationBundle): FieldLabels {
  return {
    project: trans.__('Project folder'),
    entry: trans.__('Entry point'),
    venv: trans.__('Virtual environment'),
    image: trans.__('Image'),
    gpus: trans.__('GPUs'),
    nodes: trans.__('Nodes'),
    cpus: trans.__('CPUs'),
    memory: trans.__('Memory'),
    timeLimit: trans.__('Time limit (min)'),
    args: trans.__('Arguments'),
    env: trans.__('Environment variables'),
    compression: trans.__('Compression level'),
    excludes: trans.__('Extra excludes'),
    scheduler: trans.__('Scheduler'),
    baseShip: trans.__('Lab-base packages the image lacks'),
    baseConflicts: trans.__('Version conflicts'),
    sweep: trans.__('Sweep'),
    maxParallel: trans.__('Max parallel'),
    retries: trans.__('Retries'),
    maxAttempts: trans.__('Resumes'),
    allowMissingImports: trans.__('Send even if imports are missing')
  };
}

/** The label of the field (or section) an error belongs to; a Sweep row's is the section's. */
export function errorLabel(key: ErrorKey, labels: FieldLabels): string {
  return key.startsWith('sweep.') ? labels.sweep : labels[key as FormField];
}

/** Why a resource field is off: the scheduler cannot give a job what it asks for. */
export function unhonouredReason(
  field: ResourceField,
  scheduler: string,
  trans: TranslationBundle
): string {
  const reasons: { [key in ResourceField]: string } = {
    gpus: trans.__('The %1 scheduler hands out no GPUs.', scheduler),
    nodes: trans.__('The %1 scheduler runs a job on one node only.', scheduler),
    cpus: trans.__(
      'The %1 scheduler cannot give a job a number of CPU cores.',
      scheduler
    ),
    memory: trans.__(
      'The %1 scheduler cannot give a job an amount of memory.',
      scheduler
    ),
    timeLimit: trans.__(
      'The %1 scheduler cannot end a job at a time limit.',
      scheduler
    )
  };
  return `${reasons[field]} ${trans.__('This field is not sent.')}`;
}

/**
 * A server hint in the form's words: the CLI's flags it names become the form's own controls
 * (the server's words serve the CLI, the magic and the form alike).
 */
export function flagsInFormWords(
  text: string,
  trans: TranslationBundle
): string {
  return text.replace(
    '--allow-missing-imports',
    trans.__('"%1" (Advanced)', trans.__('Send even if imports are missing'))
  );
}
