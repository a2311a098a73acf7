/**
 * `ComputeForm`: the state of the Compute form outside React, so that commands (toolbar,
 * context menu) can fill and send it too: values (the Sweep section's parameters included),
 * defaults from the server config and the user's settings, inline field errors, the debounced
 * preflight, and sending.
 */
import { PageConfig } from '@jupyterlab/coreutils';
import { Contents, Kernel } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Debouncer } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { JobsModel, jobsApi } from '../jobs';
import { kernelPrefix, kernelVenv } from '../kernelenv';
import { JobRecord, JobRequest, PackPlan, ServerConfig } from '../models';
import { guessProject } from '../project';
import { J2CRequestError } from '../request';
import { IJ2CSettings, J2CSettings } from '../settings';
import {
  FieldLabels,
  errorLabel,
  fieldLabels,
  flagsInFormWords
} from './labels';
import {
  EMPTY_VALUES,
  ErrorKey,
  FieldErrors,
  FormField,
  IFormValues,
  ISweepParam,
  ResourceField,
  buildRequest,
  formFieldOf,
  inFormWords,
  joinArgs,
  sweepSize,
  unhonoured
} from './values';

/** Fields whose change changes what would be packed: they re-run the preflight. */
const PACKED_FIELDS: ReadonlySet<FormField> = new Set<FormField>([
  'project',
  'entry',
  'venv',
  'excludes',
  'compression',
  'baseShip',
  'baseConflicts'
]);

const PREFLIGHT_DELAY_MS = 600;

/** One thing wrong with the form, as the summary beside the Send button lists it. */
export interface IFormProblem {
  /** The field (or section) at fault; null for an error that names none. */
  key: ErrorKey | null;
  /** The field's label, as the form shows it ('' for none). */
  label: string;
  message: string;
}

/** The job a "Run again…" filled the form from. */
export interface IRerunSource {
  id: string;
  name: string;
}

export interface IPreflightState {
  plan: PackPlan | null;
  running: boolean;
  error: string | null;
}

export class ComputeForm {
  constructor(options: ComputeForm.IOptions) {
    this._contents = options.contents;
    this._jobs = options.jobs;
    this._trans = options.trans;
    this._settings = options.settings;
    this._settings.changed.connect((_, current) =>
      this._applyDefaults(current)
    );
    this._applyDefaults(this._settings.current);
    this._debouncer = new Debouncer(() => this.check(true), PREFLIGHT_DELAY_MS);
    this._labels = fieldLabels(options.trans);
  }

  /** The form's words for its fields. */
  get labels(): FieldLabels {
    return this._labels;
  }

  /**
   * Everything wrong with the form, each named by its field's label (the summary beside the
   * Send button, and the toast when a send fails): the fields' errors in the form's order,
   * then an error that names no field.
   */
  get problems(): IFormProblem[] {
    const order = Object.keys(this._labels);
    const keys = (Object.keys(this._errors) as ErrorKey[]).sort(
      (a, b) =>
        order.indexOf(a.startsWith('sweep.') ? 'sweep' : a) -
        order.indexOf(b.startsWith('sweep.') ? 'sweep' : b)
    );
    const problems: IFormProblem[] = keys.map(key => ({
      key,
      label: errorLabel(key, this._labels),
      message: this._errors[key] ?? ''
    }));
    if (this._formError) {
      problems.push({ key: null, label: '', message: this._formError });
    }
    return problems;
  }

  /** The scheduler the job goes to: the one chosen, else the server's default. */
  get scheduler(): string {
    return this._values.scheduler || this._config?.default_scheduler || '';
  }

  /**
   * The resource fields the chosen scheduler cannot honour (its capabilities, from the
   * server): the form disables them and never sends them.
   */
  get unhonoured(): ReadonlySet<ResourceField> {
    return unhonoured(this._config?.capabilities?.[this.scheduler]);
  }

  /** The job "Run again…" filled the form from (the next send is a new run), else null. */
  get rerunOf(): IRerunSource | null {
    return this._rerunOf;
  }

  get values(): Readonly<IFormValues> {
    return this._values;
  }

  get errors(): Readonly<FieldErrors> {
    return this._errors;
  }

  /** An error that names no field (e.g. the scheduler is unreachable). */
  get formError(): string | null {
    return this._formError;
  }

  get preflight(): Readonly<IPreflightState> {
    return this._preflight;
  }

  get sending(): boolean {
    return this._sending;
  }

  get config(): ServerConfig | null {
    return this._config;
  }

  get settings(): IJ2CSettings {
    return this._settings.current;
  }

  /** Why the venv field holds what it holds (the server's words), until the user edits it. */
  get venvReason(): string {
    return this._venvReason;
  }

  /** Whether the user typed a project, entry point or venv (then they stay put). */
  get pathsEdited(): boolean {
    return ['project', 'entry', 'venv'].some(f =>
      this._edited.has(f as FormField)
    );
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  setConfig(config: ServerConfig): void {
    this._config = config;
    this._applyDefaults(this._settings.current);
  }

  /** A user's edit of one field. */
  set(field: FormField, value: string): void {
    this._edited.add(field);
    const change: Partial<IFormValues> = { [field]: value };
    if (field === 'venv') {
      this._venvReason = '';
    }
    // A new project gets the server's venv for it at the next preflight or send.
    this._update(change, field);
  }

  setNoWait(noWait: boolean): void {
    this._values = { ...this._values, noWait };
    this._changed.emit();
  }

  setAllowMissingImports(allowMissingImports: boolean): void {
    this._values = { ...this._values, allowMissingImports };
    this._changed.emit();
  }

  /** Whether the Sweep section is unfolded (it unfolds by itself to show its error). */
  get sweepOpen(): boolean {
    return this._sweepOpen;
  }

  setSweepOpen(open: boolean): void {
    if (open !== this._sweepOpen) {
      this._sweepOpen = open;
      this._changed.emit();
    }
  }

  /** Each filled parameter's count of values and their product; null: no sweep. */
  get sweepSize(): { factors: number[]; total: number } | null {
    return sweepSize(this._values.sweepParams);
  }

  /** A new, empty parameter row at the end; its id (the view focuses it). */
  addSweepParam(): number {
    const id = ++this._sweepIds;
    this._updateSweep([
      ...this._values.sweepParams,
      { id, name: '', values: '' }
    ]);
    return id;
  }

  /** A user's edit of one parameter row's name or values. */
  setSweepParam(id: number, part: 'name' | 'values', value: string): void {
    this._updateSweep(
      this._values.sweepParams.map(param =>
        param.id === id ? { ...param, [part]: value } : param
      )
    );
  }

  removeSweepParam(id: number): void {
    this._updateSweep(
      this._values.sweepParams.filter(param => param.id !== id)
    );
  }

  /**
   * Describe the project of `path` (a .py or .ipynb file): folder, entry point and venv, by
   * the server's one rule (given the sys.prefix of `kernel`, the notebook's running kernel),
   * and why that venv; then start a preflight (not awaited: sending need not wait for it).
   */
  async fillFor(
    path: string,
    kernel?: Kernel.IKernelConnection | null
  ): Promise<void> {
    const ticket = ++this._fillTicket;
    const prefix = kernel ? await kernelPrefix(kernel) : null;
    let fill: { project: string; entry: string; venv: string; reason: string };
    try {
      const defaults = await jobsApi.defaults(path, prefix);
      fill = {
        project: fromRoot(defaults.code_path),
        entry: defaults.call_path ?? '',
        venv: fromRoot(defaults.venv_path ?? ''),
        reason: defaults.venv_reason
      };
    } catch {
      // A server without the defaults route: look from here, proposing only what is seen.
      const [guess, venv] = await Promise.all([
        guessProject(this._contents, path),
        kernel ? kernelVenv(kernel, path) : Promise.resolve(null)
      ]);
      fill = { ...guess, venv: venv ?? guess.venv, reason: '' };
    }
    if (ticket !== this._fillTicket) {
      return; // a later call describes a newer file or kernel
    }
    for (const field of ['project', 'entry', 'venv'] as FormField[]) {
      this._edited.delete(field);
    }
    this._rerunOf = null;
    this._venvFor = fill.project;
    this._venvReason = fill.reason;
    this._errors = {};
    this._formError = null;
    this._update(
      { project: fill.project, entry: fill.entry, venv: fill.venv },
      null
    );
    void this.check(true);
  }

  /**
   * "Run again…": the form holds what `record` was sent with (its arguments, environment,
   * resources, sweep, options), for the user to change and send as a new run. Its paths are
   * shown relative to the server's root where they lie in it (the server keeps them absolute).
   */
  fillFromJob(record: JobRecord): void {
    const request = record.request;
    const root = PageConfig.getOption('serverRoot');
    const project = underRoot(request.code_path, root);
    const entry = request.call_path.startsWith('/')
      ? underFolder(request.call_path, request.code_path)
      : request.call_path;
    const resources = request.resources ?? {};
    const sweep = request.sweep;
    const env = { ...(request.env ?? {}), ...(sweep?.env ?? {}) };
    const params: ISweepParam[] = Object.entries(sweep?.grid ?? {}).map(
      ([name, values]) => ({
        id: ++this._sweepIds,
        name,
        values: values.join(', ')
      })
    );
    const values: IFormValues = {
      ...this._values,
      project,
      entry,
      venv: request.venv_path ? underRoot(request.venv_path, root) : '',
      image: request.image ?? this._values.image, // none: the default, as the form has it
      gpus: String(resources.gpus ?? 0),
      nodes: String(resources.nodes ?? 1),
      cpus: optional(resources.cpus),
      memory: resources.memory ?? '',
      timeLimit: optional(resources.time_limit_minutes),
      args: joinArgs(request.args ?? []),
      env: Object.entries(env)
        .map(([name, value]) => `${name}=${value}`)
        .join('\n'),
      compression: optional(request.compression_level),
      excludes: (request.excludes ?? []).join('\n'),
      scheduler: request.scheduler ?? record.scheduler,
      baseShip:
        request.ship_base === true
          ? 'ship'
          : request.ship_base === false
            ? 'skip'
            : '',
      baseConflicts: request.base_conflicts ?? '',
      allowMissingImports: request.allow_missing_imports ?? false,
      sweepParams: params,
      maxParallel: optional(sweep?.max_parallel),
      retries: sweep?.retries ? String(sweep.retries) : '',
      maxAttempts: optional(request.max_attempts)
    };
    this._fillTicket++; // a description of the current file still on its way is stale now
    for (const field of Object.keys(values) as FormField[]) {
      this._edited.add(field);
    }
    this._values = values;
    this._venvFor = project;
    this._venvReason = '';
    this._errors = {};
    this._formError = null;
    this._sweepOpen = params.length > 0;
    this._rerunOf = { id: record.id, name: record.name };
    this._changed.emit();
    void this.check(true);
  }

  /**
   * Run the preflight now: what would be packed, left out and warned about. `quiet` (while
   * typing) skips an incomplete form instead of flagging its fields.
   */
  async check(quiet = false): Promise<void> {
    await this._followProject();
    const request = this._build(quiet, false);
    if (!request) {
      this._setPreflight({ plan: null, running: false, error: null });
      return;
    }
    const ticket = ++this._preflightTicket;
    this._setPreflight({ ...this._preflight, running: true, error: null });
    try {
      const plan = await jobsApi.preflight(request);
      if (ticket === this._preflightTicket) {
        this._setPreflight({ plan, running: false, error: null });
      }
    } catch (error) {
      if (ticket === this._preflightTicket) {
        this._setPreflight({
          plan: null,
          running: false,
          error: messageOf(error)
        });
        this._showError(error);
      }
    }
  }

  /** Send the form as a job; the record, or null when something is wrong (shown inline). */
  async submit(): Promise<JobRecord | null> {
    if (this._sending) {
      return null;
    }
    this._sending = true;
    this._formError = null;
    this._changed.emit();
    try {
      await this._followProject();
      const request = this._build();
      if (!request) {
        return null;
      }
      if (this._rerunOf) {
        request.new = true; // run again: never attach to the job it came from
      }
      const record = await this._jobs.submit(request);
      this._rerunOf = null;
      return record;
    } catch (error) {
      this._showError(error);
      return null;
    } finally {
      this._sending = false;
      this._changed.emit();
    }
  }

  /**
   * When the project changed and nobody typed a venv, take the server's venv for it (its one
   * rule, as for a file: never a `.venv` that does not exist).
   */
  private async _followProject(): Promise<void> {
    const project = this._values.project.trim();
    if (this._edited.has('venv') || project === this._venvFor) {
      return;
    }
    this._venvFor = project;
    let venv = '';
    let reason = '';
    try {
      // The route takes a folder too: the venv its rule picks for that project.
      const defaults = await jobsApi.defaults(project);
      venv = fromRoot(defaults.venv_path ?? '');
      reason = defaults.venv_reason;
    } catch {
      // No defaults route (an older server), or no such folder yet: no venv is proposed.
    }
    if (!this._edited.has('venv') && this._values.project.trim() === project) {
      this._venvReason = reason;
      this._update({ venv }, null);
    }
  }

  /**
   * An error on its field when it names one, else above the Send button; in the form's words
   * (its labels, never the server's field names), with the server's hint.
   */
  private _showError(error: unknown): void {
    const field =
      error instanceof J2CRequestError ? formFieldOf(error.field) : null;
    const words = (text: string): string =>
      flagsInFormWords(
        inFormWords(text, key => errorLabel(key, this._labels)),
        this._trans
      );
    let message = words(messageOf(error));
    const hint = error instanceof J2CRequestError ? error.hint : undefined;
    if (hint) {
      message = `${message} (${words(hint)})`;
    }
    if (field) {
      // The label stands beside the message wherever it shows: not twice.
      const label = errorLabel(field, this._labels);
      if (message.startsWith(`${label}: `)) {
        message = message.slice(label.length + 2);
      }
      this._errors = { ...this._errors, [field]: message };
      if (isSweepKey(field)) {
        this._sweepOpen = true;
      }
    } else {
      this._formError = message;
    }
    this._changed.emit();
  }

  dispose(): void {
    this._debouncer.dispose();
    Signal.clearData(this);
  }

  /**
   * The request, or null after showing what is wrong (unless `quiet`). The preflight's
   * (`sweep: false`) leaves the sweep out: it asks what would be packed, the same either way.
   */
  private _build(quiet = false, sweep = true): JobRequest | null {
    const t = this._trans;
    const { request, errors } = buildRequest(
      this._values,
      {
        entryRequired: t.__('Choose the script or notebook to run.'),
        wholeNumber: t.__('Enter a whole number (0 or more).'),
        positiveNumber: t.__('Enter a number above 0, or leave empty.'),
        nodeCount: t.__('Enter a whole number of nodes (1 or more).'),
        timeLimit: t.__(
          'Enter a whole number of minutes (1 or more), or leave empty.'
        ),
        compressionRange: t.__('Enter a level from 1 to 22, or leave empty.'),
        openQuote: t.__('A quote is not closed.'),
        maxParallel: t.__('Enter a whole number (1 or more), or leave empty.'),
        retries: t.__('Enter a whole number (0 or more), or leave empty.'),
        maxAttempts: t.__('Enter a whole number (0 or more), or leave empty.'),
        sweepName: t.__('Name this parameter, or remove the row.'),
        sweepValues: t.__('Give this parameter at least one value.'),
        sweepEmptyValue: t.__(
          'A value is empty (two commas meet, or one ends the list).'
        ),
        sweepTwice: t.__('This name is swept above already: give it once.')
      },
      { sweep, unhonoured: this.unhonoured }
    );
    if (!request && !quiet) {
      this._errors = { ...this._errors, ...errors };
      if (Object.keys(errors).some(key => isSweepKey(key as ErrorKey))) {
        this._sweepOpen = true;
      }
      this._changed.emit();
    }
    return request;
  }

  /** New Sweep rows: the section's errors, the server's included, go with the old ones. */
  private _updateSweep(sweepParams: ISweepParam[]): void {
    const errors: FieldErrors = {};
    for (const [key, message] of Object.entries(this._errors)) {
      if (!isSweepKey(key as ErrorKey) || SWEEP_FIELDS.has(key)) {
        errors[key as ErrorKey] = message;
      }
    }
    this._errors = errors;
    this._values = { ...this._values, sweepParams };
    this._formError = null;
    this._changed.emit();
  }

  private _update(
    change: Partial<IFormValues>,
    edited: FormField | null
  ): void {
    this._values = { ...this._values, ...change };
    const errors = { ...this._errors };
    for (const field of Object.keys(change) as FormField[]) {
      delete errors[field];
    }
    if (edited === 'args' || edited === 'env') {
      // The server's sweep errors are often about these ({name} used nowhere, a brace).
      delete errors.sweep;
    }
    this._errors = errors;
    this._formError = null;
    this._changed.emit();
    if (edited && PACKED_FIELDS.has(edited)) {
      void this._debouncer.invoke();
    }
  }

  /** Defaults from the settings and the server config, for the fields nobody edited. */
  private _applyDefaults(settings: IJ2CSettings): void {
    const defaults: Partial<IFormValues> = {
      image: settings.defaultImage || this._config?.default_image || '',
      gpus: String(settings.defaultGpus),
      cpus: settings.defaultCpus === null ? '' : String(settings.defaultCpus),
      memory: settings.defaultMemory,
      scheduler: this._config?.default_scheduler ?? ''
    };
    const change: Partial<IFormValues> = {};
    for (const [field, value] of Object.entries(defaults) as [
      FormField,
      string
    ][]) {
      if (!this._edited.has(field)) {
        change[field] = value;
      }
    }
    this._values = { ...this._values, ...change };
    this._changed.emit();
  }

  private _setPreflight(state: IPreflightState): void {
    this._preflight = state;
    this._changed.emit();
  }

  private readonly _contents: Contents.IManager;
  private readonly _jobs: JobsModel;
  private readonly _trans: TranslationBundle;
  private readonly _settings: J2CSettings;
  private readonly _debouncer: Debouncer;
  private readonly _labels: FieldLabels;
  private _rerunOf: IRerunSource | null = null;
  private _config: ServerConfig | null = null;
  private _values: IFormValues = EMPTY_VALUES;
  private _errors: FieldErrors = {};
  private _formError: string | null = null;
  private _preflight: IPreflightState = {
    plan: null,
    running: false,
    error: null
  };
  private _preflightTicket = 0;
  private _fillTicket = 0;
  private _sending = false;
  private _sweepOpen = false;
  private _sweepIds = 0;
  /** The project the venv field was last defaulted for. */
  private _venvFor = '';
  private _venvReason = '';
  private readonly _edited = new Set<FormField>();
  private readonly _changed = new Signal<this, void>(this);
}

export namespace ComputeForm {
  export interface IOptions {
    contents: Contents.IManager;
    jobs: JobsModel;
    settings: J2CSettings;
    trans: TranslationBundle;
  }
}

/** The Sweep section's own fields (their errors stay when its rows change). */
const SWEEP_FIELDS: ReadonlySet<string> = new Set(['maxParallel', 'retries']);

/** Whether an error shows in the Sweep section (its own, a row's, its fields'). */
function isSweepKey(key: ErrorKey): boolean {
  return key === 'sweep' || SWEEP_FIELDS.has(key) || key.startsWith('sweep.');
}

/** A number the request may leave out, as a field holds it ('' for none). */
function optional(value: number | null | undefined): string {
  return value === null || value === undefined ? '' : String(value);
}

/** `path` relative to `folder` when it lies in it ('' for the folder itself), else as is. */
function underFolder(path: string, folder: string): string {
  const base = folder.replace(/\/+$/, '');
  if (!base || !path.startsWith('/')) {
    return path;
  }
  if (path === base) {
    return '';
  }
  return path.startsWith(`${base}/`) ? path.slice(base.length + 1) : path;
}

/** An absolute path the server recorded, relative to the server's root where it lies in it. */
function underRoot(path: string, root: string): string {
  return root.startsWith('/') ? underFolder(path, root) : path;
}

/** A server path relative to the root as the form writes it ('' is the root itself). */
function fromRoot(path: string): string {
  return path === '.' ? '' : path.replace(/^\.\//, '');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
