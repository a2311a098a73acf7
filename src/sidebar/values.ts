/**
 * The Compute form's values as typed, turned into a `JobRequest` (with the client-side checks
 * that need no server), and the server's error fields mapped back onto form fields.
 */
import { JobRequest } from '../models';

export interface IFormValues {
  project: string;
  entry: string;
  venv: string;
  image: string;
  gpus: string;
  nodes: string;
  cpus: string;
  memory: string;
  args: string;
  env: string;
  compression: string;
  excludes: string;
  scheduler: string;
  /** Lab-base packages the image lacks: '' (the server's setting), 'ship' or 'skip'. */
  baseShip: string;
  /** A needed lab-base package the image has at another version: '', auto, ship, image. */
  baseConflicts: string;
  noWait: boolean;
}

export type FormField = Exclude<keyof IFormValues, 'noWait'>;

export type FieldErrors = Partial<Record<FormField, string>>;

export const EMPTY_VALUES: IFormValues = {
  project: '',
  entry: '',
  venv: '',
  image: '',
  gpus: '0',
  nodes: '1',
  cpus: '',
  memory: '',
  args: '',
  env: '',
  compression: '',
  excludes: '',
  scheduler: '',
  baseShip: '',
  baseConflicts: '',
  noWait: false
};

/** The server's `field` (a JobRequest path such as `resources.memory` or `env.FOO`). */
const SERVER_FIELDS: [string, FormField][] = [
  ['code_path', 'project'],
  ['call_path', 'entry'],
  ['venv_path', 'venv'],
  ['image', 'image'],
  ['resources.gpus', 'gpus'],
  ['resources.nodes', 'nodes'],
  ['resources.cpus', 'cpus'],
  ['resources.memory', 'memory'],
  ['args', 'args'],
  ['env', 'env'],
  ['compression_level', 'compression'],
  ['excludes', 'excludes'],
  ['includes', 'excludes'],
  ['scheduler', 'scheduler'],
  ['ship_base', 'baseShip'],
  ['base_conflicts', 'baseConflicts'],
  ['force_base', 'baseConflicts']
];

/** The form field a server error names, or null when it names none we show. */
export function formFieldOf(field: string | undefined): FormField | null {
  if (!field) {
    return null;
  }
  for (const [prefix, formField] of SERVER_FIELDS) {
    if (field === prefix || field.startsWith(`${prefix}.`)) {
      return formField;
    }
  }
  return null;
}

/**
 * Split a command line into arguments as a POSIX shell would for plain words, single and
 * double quotes and backslashes (no variables, no globbing). Null when a quote is open.
 */
export function splitArgs(line: string): string[] | null {
  const args: string[] = [];
  let current = '';
  let inWord = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < line.length; i++) {
    const char = line[i];
    if (quote) {
      if (char === quote) {
        quote = null;
      } else if (char === '\\' && quote === '"' && i + 1 < line.length) {
        current += line[++i];
      } else {
        current += char;
      }
    } else if (char === '"' || char === "'") {
      quote = char;
      inWord = true;
    } else if (char === '\\' && i + 1 < line.length) {
      current += line[++i];
      inWord = true;
    } else if (/\s/.test(char)) {
      if (inWord) {
        args.push(current);
        current = '';
        inWord = false;
      }
    } else {
      current += char;
      inWord = true;
    }
  }
  if (quote) {
    return null;
  }
  if (inWord) {
    args.push(current);
  }
  return args;
}

/** `NAME=value` lines; blank lines and `#` comments are skipped. */
export function parseEnv(
  text: string
): { env: { [key: string]: string } } | { error: string } {
  const env: { [key: string]: string } = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line || line.startsWith('#')) {
      continue;
    }
    const eq = line.indexOf('=');
    const name = eq > 0 ? line.slice(0, eq).trim() : '';
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      return { error: `line ${i + 1}: expected NAME=value` };
    }
    env[name] = line.slice(eq + 1);
  }
  return { env };
}

function lines(text: string): string[] {
  return text
    .split('\n')
    .map(line => line.trim())
    .filter(line => line.length > 0);
}

function numberOrNull(text: string): number | null | undefined {
  const trimmed = text.trim();
  if (!trimmed) {
    return null;
  }
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : undefined;
}

export interface IBuildResult {
  request: JobRequest | null;
  errors: FieldErrors;
}

/** The messages of the checks below, translated by the caller. */
export interface IMessages {
  entryRequired: string;
  wholeNumber: string;
  positiveNumber: string;
  nodeCount: string;
  compressionRange: string;
  openQuote: string;
}

/** The `JobRequest` the form describes, or the fields that are wrong. */
export function buildRequest(
  values: IFormValues,
  messages: IMessages
): IBuildResult {
  const errors: FieldErrors = {};
  if (!values.entry.trim()) {
    errors.entry = messages.entryRequired;
  }
  const gpus = numberOrNull(values.gpus);
  if (
    gpus === undefined ||
    (gpus !== null && (!Number.isInteger(gpus) || gpus < 0))
  ) {
    errors.gpus = messages.wholeNumber;
  }
  const nodes = numberOrNull(values.nodes);
  if (
    nodes === undefined ||
    (nodes !== null && (!Number.isInteger(nodes) || nodes < 1))
  ) {
    errors.nodes = messages.nodeCount;
  }
  const cpus = numberOrNull(values.cpus);
  if (cpus === undefined || (cpus !== null && cpus <= 0)) {
    errors.cpus = messages.positiveNumber;
  }
  const level = numberOrNull(values.compression);
  if (
    level === undefined ||
    (level !== null && (!Number.isInteger(level) || level < 1 || level > 22))
  ) {
    errors.compression = messages.compressionRange;
  }
  const args = splitArgs(values.args);
  if (args === null) {
    errors.args = messages.openQuote;
  }
  const env = parseEnv(values.env);
  if ('error' in env) {
    errors.env = env.error;
  }
  if (Object.keys(errors).length || args === null || 'error' in env) {
    return { request: null, errors };
  }
  const request: JobRequest = {
    code_path: values.project.trim() || '.',
    call_path: values.entry.trim(),
    venv_path: values.venv.trim() || null,
    args,
    env: env.env,
    image: values.image || null,
    resources: {
      gpus: gpus ?? 0,
      nodes: nodes ?? 1,
      cpus: cpus ?? null,
      memory: values.memory.trim() || null
    },
    scheduler: values.scheduler || null,
    compression_level: level ?? null,
    excludes: lines(values.excludes),
    ship_base:
      values.baseShip === 'ship'
        ? true
        : values.baseShip === 'skip'
          ? false
          : null,
    base_conflicts:
      values.baseConflicts === 'auto' ||
      values.baseConflicts === 'ship' ||
      values.baseConflicts === 'image'
        ? values.baseConflicts
        : null
  };
  return { request, errors };
}
