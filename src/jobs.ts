/**
 * The client of the j2c REST API (`jobsApi`) and `JobsModel`: the job list every part of the UI
 * shares, refreshed by a `Poll` (backoff on failure, standby while the page is hidden) and
 * at once after each action.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { URLExt } from '@jupyterlab/coreutils';

import { isTerminal } from './format';
import {
  ArtifactCopy,
  Event,
  JobRecord,
  JobRequest,
  PackPlan,
  SendDefaults,
  ServerConfig
} from './models';
import { downloadUrl, requestAPI } from './request';

const jsonPost = (body: unknown): RequestInit => ({
  method: 'POST',
  body: JSON.stringify(body)
});

const job = (id: string, tail = ''): string =>
  `jobs/${encodeURIComponent(id)}${tail}`;

const artifact = (id: string, name: string, tail = ''): string =>
  job(id, `/artifacts/${URLExt.encodeParts(name)}${tail}`);

/** One function per route of the server extension. */
export const jobsApi = {
  config: (): Promise<ServerConfig> => requestAPI<ServerConfig>('config'),
  preflight: (request: JobRequest): Promise<PackPlan> =>
    requestAPI<PackPlan>('preflight', jsonPost(request)),
  submit: (request: JobRequest): Promise<JobRecord> =>
    requestAPI<JobRecord>('jobs', jsonPost(request)),
  /**
   * The server's one rule for what sending `path` (a file or folder relative to the root)
   * ships: project, entry point and venv (as `%j2c submit`), given the kernel's sys.prefix.
   */
  defaults: (
    path: string,
    kernelPrefix?: string | null
  ): Promise<SendDefaults> => {
    const query = new URLSearchParams({ path });
    if (kernelPrefix) {
      query.set('kernel_prefix', kernelPrefix);
    }
    return requestAPI<SendDefaults>(`defaults?${query.toString()}`);
  },
  list: (): Promise<JobRecord[]> => requestAPI<JobRecord[]>('jobs'),
  get: (id: string): Promise<JobRecord> => requestAPI<JobRecord>(job(id)),
  cancel: (id: string): Promise<JobRecord> =>
    requestAPI<JobRecord>(job(id, '/cancel'), { method: 'POST' }),
  remove: (id: string): Promise<void> =>
    requestAPI<void>(job(id), { method: 'DELETE' }),
  events: (id: string, after: number, limit: number): Promise<Event[]> =>
    requestAPI<Event[]>(job(id, `/events?after=${after}&limit=${limit}`)),
  /** Where the browser downloads one of a finished job's artifacts. */
  artifactUrl: (id: string, name: string): string =>
    downloadUrl(artifact(id, name)),
  /** Copy an artifact into the job's project folder; answers its path under the root. */
  copyArtifact: (id: string, name: string): Promise<ArtifactCopy> =>
    requestAPI<ArtifactCopy>(artifact(id, name, '/copy'), { method: 'POST' })
};

/** Poll faster while something runs: statuses change and users watch. */
const ACTIVE_INTERVAL_MS = 2000;
const IDLE_INTERVAL_MS = 15000;
const MAX_BACKOFF_MS = 60000;

/** The job list, shared by the sidebar, the status bar and the notifications. */
export class JobsModel implements IDisposable {
  constructor() {
    this._poll = new Poll({
      name: 'j2c:jobs',
      factory: () => this._load(),
      frequency: {
        interval: ACTIVE_INTERVAL_MS,
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      standby: 'when-hidden'
    });
  }

  /** Every job, newest first. */
  get jobs(): readonly JobRecord[] {
    return this._jobs;
  }

  /** The jobs not yet in a terminal status. */
  get active(): JobRecord[] {
    return this._jobs.filter(record => !isTerminal(record.status));
  }

  /** Whether the last refresh failed (the message), else null. */
  get error(): string | null {
    return this._error;
  }

  /** Whether the list was loaded at least once. */
  get loaded(): boolean {
    return this._loaded;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** A job that this page saw active reached a terminal status. */
  get ended(): ISignal<this, JobRecord> {
    return this._ended;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Reload now (after an action, or when a log panel saw a status change). */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  find(id: string): JobRecord | undefined {
    return this._jobs.find(record => record.id === id);
  }

  async submit(request: JobRequest): Promise<JobRecord> {
    const record = await jobsApi.submit(request);
    this._upsert(record);
    void this.refresh();
    return record;
  }

  async cancel(id: string): Promise<void> {
    this._upsert(await jobsApi.cancel(id));
    void this.refresh();
  }

  async remove(id: string): Promise<void> {
    await jobsApi.remove(id);
    this._jobs = this._jobs.filter(record => record.id !== id);
    this._changed.emit();
    void this.refresh();
  }

  /** Run the same request again as a new job (never attaches to the old one). */
  rerun(record: JobRecord): Promise<JobRecord> {
    return this.submit({ ...record.request, new: true });
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _load(): Promise<void> {
    try {
      const jobs = await jobsApi.list();
      this._error = null;
      this._replace(jobs);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (message !== this._error) {
        this._error = message;
        this._changed.emit();
      }
      throw error; // the Poll backs off
    }
  }

  private _replace(jobs: JobRecord[]): void {
    const before = new Map(this._jobs.map(record => [record.id, record]));
    this._jobs = jobs;
    for (const record of jobs) {
      const previous = before.get(record.id);
      if (
        previous &&
        !isTerminal(previous.status) &&
        isTerminal(record.status)
      ) {
        this._ended.emit(record);
      }
    }
    this._loaded = true;
    const interval = this.active.length ? ACTIVE_INTERVAL_MS : IDLE_INTERVAL_MS;
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
    this._changed.emit();
  }

  /** Show an action's answer at once, before the next refresh. */
  private _upsert(record: JobRecord): void {
    const index = this._jobs.findIndex(item => item.id === record.id);
    if (index >= 0) {
      const previous = this._jobs[index];
      if (!isTerminal(previous.status) && isTerminal(record.status)) {
        this._ended.emit(record);
      }
      this._jobs = [
        ...this._jobs.slice(0, index),
        record,
        ...this._jobs.slice(index + 1)
      ];
    } else {
      this._jobs = [record, ...this._jobs];
    }
    this._changed.emit();
  }

  private readonly _poll: Poll;
  private _jobs: JobRecord[] = [];
  private _error: string | null = null;
  private _loaded = false;
  private readonly _changed = new Signal<this, void>(this);
  private readonly _ended = new Signal<this, JobRecord>(this);
}
