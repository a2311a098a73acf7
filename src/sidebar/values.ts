/**
 * The Compute form's values as typed, turned into a `JobRequest` (with the client-side checks
 * that need no server), and the server's error fields mapped back onto form fields. The Sweep
 * section's rows become `JobRequest.sweep` here too (`buildSweep`, `sweepSize`).
 */
import { Capabilities, JobRequest, SweepSpec } from '../models';

/** One row of the Sweep section: a swept name and its values as typed (comma-separated). */
export interface ISweepParam {
  /** The row's own id, kept across edits: its error and focus follow it when rows move. */
  id: number;
  name: string;
  values: string;
}

export interface IFormValues {
  project: string;
  entry: string;
  venv: string;
  image: string;
  gpus: string;
  nodes: string;
  cpus: string;
  memory: string;
  /** Wall-clock limit in minutes; '': the scheduler's default. */
  timeLimit: string;
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
  /** Send even when an import nothing provides was found (`allow_missing_imports`). */
  allowMissingImports: boolean;
  /** The Sweep section's parameters; none (or only blank rows): a single job. */
  sweepParams: readonly ISweepParam[];
  /** At most this many variants at once; '': all. */
  maxParallel: string;
  /** Re-runs of a variant that exits non-zero; '': none. */
  retries: string;
  /** New attempts after a preemption or a lost node; '': the server's resume.max_attempts. */
  maxAttempts: string;
}

/** The form's text fields (each one control bound by `set`). */
export type FormField = Exclude<
  keyof IFormValues,
  'noWait' | 'allowMissingImports' | 'sweepParams'
>;

/** Where an error shows: a field, the Sweep section as a whole, or one of its rows (by id). */
export type ErrorKey = FormField | 'sweep' | `sweep.${number}`;

export type FieldErrors = Partial<Record<ErrorKey, string>>;

export const EMPTY_VALUES: IFormValues = {
  project: '',
  entry: '',
  venv: '',
  image: '',
  gpus: '0',
  nodes: '1',
  cpus: '',
  memory: '',
  timeLimit: '',
  args: '',
  env: '',
  compression: '',
  excludes: '',
  scheduler: '',
  baseShip: '',
  baseConflicts: '',
  noWait: false,
  allowMissingImports: false,
  sweepParams: [],
  maxParallel: '',
  retries: '',
  maxAttempts: ''
};

/** The server's `field` (a JobRequest path such as `resources.memory` or `env.FOO`). */
const SERVER_FIELDS: [string, ErrorKey][] = [
  ['code_path', 'project'],
  ['call_path', 'entry'],
  ['venv_path', 'venv'],
  ['image', 'image'],
  ['resources.gpus', 'gpus'],
  ['resources.nodes', 'nodes'],
  ['resources.cpus', 'cpus'],
  ['resources.memory', 'memory'],
  ['resources.time_limit_minutes', 'timeLimit'],
  ['args', 'args'],
  ['env', 'env'],
  ['compression_level', 'compression'],
  ['excludes', 'excludes'],
  ['includes', 'excludes'],
  ['scheduler', 'scheduler'],
  ['ship_base', 'baseShip'],
  ['base_conflicts', 'baseConflicts'],
  ['force_base', 'baseConflicts'],
  ['sweep.max_parallel', 'maxParallel'],
  ['sweep.retries', 'retries'],
  ['sweep', 'sweep'],
  ['max_attempts', 'maxAttempts']
];

/** Where a server error shows (its field's key), or null when it names none we show. */
export function formFieldOf(field: string | undefined): ErrorKey | null {
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
 * A server message as the form shows it: the server's own name of a field (`call_path: ...`,
 * `resources.memory`) becomes the form's label, so the user reads the words on the screen.
 */
export function inFormWords(
  message: string,
  labelOf: (key: ErrorKey) => string
): string {
  let text = message;
  // Longest names first: `sweep.max_parallel` before `sweep`.
  const names = [...SERVER_FIELDS].sort((a, b) => b[0].length - a[0].length);
  for (const [name, key] of names) {
    if (text.startsWith(`${name}: `)) {
      text = `${labelOf(key)}: ${text.slice(name.length + 2)}`;
    }
  }
  for (const [name, key] of names) {
    if (/[._]/.test(name)) {
      // Names of several words only: plain words (`args`, `image`) read as themselves.
      const pattern = new RegExp(`\\b${name.replace('.', '\\.')}\\b`, 'g');
      text = text.replace(pattern, labelOf(key));
    }
  }
  return text;
}

/** The resource fields a scheduler may be unable to honour. */
export type ResourceField = 'gpus' | 'nodes' | 'cpus' | 'memory' | 'timeLimit';

/** Which capability of the scheduler each resource field needs. */
export const RESOURCE_NEEDS: { [field in ResourceField]: keyof Capabilities } =
  {
    gpus: 'gpus',
    nodes: 'multi_node',
    cpus: 'cpus',
    memory: 'memory',
    timeLimit: 'time_limit'
  };

/**
 * The resource fields the scheduler cannot honour, by its capabilities (the server refuses a
 * request that asks for them); none when its capabilities are not known.
 */
export function unhonoured(
  capabilities: Capabilities | null | undefined
): ReadonlySet<ResourceField> {
  const fields = new Set<ResourceField>();
  if (!capabilities) {
    return fields;
  }
  for (const [field, need] of Object.entries(RESOURCE_NEEDS) as [
    ResourceField,
    keyof Capabilities
  ][]) {
    if (capabilities[need] !== true) {
      fields.add(field);
    }
  }
  return fields;
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

/**
 * Arguments written back as a line `splitArgs` turns into the same list: plain words as they
 * are, others quoted (single quotes, or double quotes with backslashes where one is inside).
 */
export function joinArgs(args: readonly string[]): string {
  return args
    .map(arg => {
      if (arg && /^[A-Za-z0-9_@%+=:,./{}-]+$/.test(arg)) {
        return arg;
      }
      if (!arg.includes("'")) {
        return `'${arg}'`;
      }
      return `"${arg.replace(/(["\\])/g, '\\$1')}"`;
    })
    .join(' ');
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

/** A whole number of at least `min` (null: empty), or undefined when the text is none. */
function wholeNumberOrNull(
  text: string,
  min: number
): number | null | undefined {
  const value = numberOrNull(text);
  if (value === null || value === undefined) {
    return value;
  }
  return Number.isInteger(value) && value >= min ? value : undefined;
}

/** A Sweep row's values: split at commas, each trimmed ('' where two commas meet). */
export function splitValues(text: string): string[] {
  return text.trim() ? text.split(',').map(value => value.trim()) : [];
}

/** The rows that say something: a row with neither a name nor values is left out. */
export function filledParams(
  params: readonly ISweepParam[]
): readonly ISweepParam[] {
  return params.filter(param => param.name.trim() || param.values.trim());
}

/** How many values each filled row has (blanks between commas not counted), and the product. */
export function sweepSize(
  params: readonly ISweepParam[]
): { factors: number[]; total: number } | null {
  const filled = filledParams(params);
  if (!filled.length) {
    return null;
  }
  const factors = filled.map(
    param => splitValues(param.values).filter(value => value).length
  );
  return { factors, total: factors.reduce((a, b) => a * b, 1) };
}

/** Whether `value` names one of `names` as a `{name}` placeholder (`{{`, `}}` are braces). */
function usesAny(value: string, names: ReadonlySet<string>): boolean {
  const bare = value.replace(/\{\{|\}\}/g, '');
  const placeholder = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
  for (let m = placeholder.exec(bare); m; m = placeholder.exec(bare)) {
    if (names.has(m[1])) {
      return true;
    }
  }
  return false;
}

/**
 * The sweep the Sweep section describes, or null when it has no filled row. An env value that
 * uses a swept `{name}` moves from `env` into the sweep's env templates (the base env is sent
 * as written). Only what JSON cannot carry or what is clearly unfinished is checked here (a
 * name given twice, a row without its name or values, an empty value); the rest is the
 * server's rule (docs/sweeps.md), shown on the section.
 */
export function buildSweep(
  values: IFormValues,
  env: { [key: string]: string },
  messages: IMessages
): {
  sweep: SweepSpec | null;
  env: { [key: string]: string };
  errors: FieldErrors;
} {
  const errors: FieldErrors = {};
  const filled = filledParams(values.sweepParams);
  if (!filled.length) {
    return { sweep: null, env, errors };
  }
  const maxParallel = wholeNumberOrNull(values.maxParallel, 1);
  if (maxParallel === undefined) {
    errors.maxParallel = messages.maxParallel;
  }
  const retries = wholeNumberOrNull(values.retries, 0);
  if (retries === undefined) {
    errors.retries = messages.retries;
  }
  const grid: { [name: string]: string[] } = {};
  for (const param of filled) {
    const name = param.name.trim();
    const list = splitValues(param.values);
    const key = `sweep.${param.id}` as const;
    if (!name) {
      errors[key] = messages.sweepName;
    } else if (Object.prototype.hasOwnProperty.call(grid, name)) {
      errors[key] = messages.sweepTwice;
    } else if (!list.length) {
      errors[key] = messages.sweepValues;
    } else if (list.some(value => !value)) {
      errors[key] = messages.sweepEmptyValue;
    } else {
      grid[name] = list;
    }
  }
  const names = new Set(Object.keys(grid));
  const base: { [key: string]: string } = {};
  const templates: { [key: string]: string } = {};
  for (const [key, value] of Object.entries(env)) {
    (usesAny(value, names) ? templates : base)[key] = value;
  }
  const sweep: SweepSpec = { grid, env: templates };
  if (maxParallel) {
    sweep.max_parallel = maxParallel;
  }
  if (retries) {
    sweep.retries = retries;
  }
  return { sweep, env: base, errors };
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
  timeLimit: string;
  compressionRange: string;
  openQuote: string;
  maxParallel: string;
  retries: string;
  maxAttempts: string;
  sweepName: string;
  sweepValues: string;
  sweepEmptyValue: string;
  sweepTwice: string;
}

/**
 * The `JobRequest` the form describes, or the fields that are wrong. `sweep: false` (the
 * preflight: what would be packed) leaves the Sweep section out.
 */
export function buildRequest(
  values: IFormValues,
  messages: IMessages,
  options: { sweep?: boolean; unhonoured?: ReadonlySet<ResourceField> } = {}
): IBuildResult {
  const errors: FieldErrors = {};
  // A field the scheduler cannot honour is neither checked nor sent (the form disables it).
  const skip = options.unhonoured ?? new Set<ResourceField>();
  if (!values.entry.trim()) {
    errors.entry = messages.entryRequired;
  }
  const gpus = skip.has('gpus') ? 0 : wholeNumberOrNull(values.gpus, 0);
  if (gpus === undefined) {
    errors.gpus = messages.wholeNumber;
  }
  const nodes = skip.has('nodes') ? 1 : wholeNumberOrNull(values.nodes, 1);
  if (nodes === undefined) {
    errors.nodes = messages.nodeCount;
  }
  const cpus = skip.has('cpus') ? null : numberOrNull(values.cpus);
  if (cpus === undefined || (cpus !== null && cpus <= 0)) {
    errors.cpus = messages.positiveNumber;
  }
  const memory = skip.has('memory') ? '' : values.memory.trim();
  const minutes = skip.has('timeLimit')
    ? null
    : wholeNumberOrNull(values.timeLimit, 1);
  if (minutes === undefined) {
    errors.timeLimit = messages.timeLimit;
  }
  const level = numberOrNull(values.compression);
  if (
    level === undefined ||
    (level !== null && (!Number.isInteger(level) || level < 1 || level > 22))
  ) {
    errors.compression = messages.compressionRange;
  }
  const maxAttempts = wholeNumberOrNull(values.maxAttempts, 0);
  if (maxAttempts === undefined) {
    errors.maxAttempts = messages.maxAttempts;
  }
  const args = splitArgs(values.args);
  if (args === null) {
    errors.args = messages.openQuote;
  }
  const env = parseEnv(values.env);
  if ('error' in env) {
    errors.env = env.error;
  }
  const swept =
    options.sweep === false || 'error' in env
      ? null
      : buildSweep(values, env.env, messages);
  Object.assign(errors, swept?.errors);
  if (Object.keys(errors).length || args === null || 'error' in env) {
    return { request: null, errors };
  }
  const request: JobRequest = {
    code_path: values.project.trim() || '.',
    call_path: values.entry.trim(),
    venv_path: values.venv.trim() || null,
    args,
    env: swept?.env ?? env.env,
    image: values.image || null,
    resources: {
      gpus: gpus ?? 0,
      nodes: nodes ?? 1,
      cpus: cpus ?? null,
      memory: memory || null,
      time_limit_minutes: minutes ?? null
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
  if (swept?.sweep) {
    request.sweep = swept.sweep;
  }
  if (maxAttempts !== null && maxAttempts !== undefined) {
    request.max_attempts = maxAttempts;
  }
  if (values.allowMissingImports) {
    request.allow_missing_imports = true;
  }
  return { request, errors };
}
