/**
 * The client of the j2c REST API (`jobsApi`) and `JobsModel`: the job list every part of the UI
 * shares, refreshed by a `Poll` (backoff on failure, standby while the page is hidden and no
 * job is active) and at once after each action. The server pages the list (newest first, a `Link: rel=next`
 * cursor); the model refreshes the newest page and loads older pages on demand.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { URLExt } from '@jupyterlab/coreutils';

import { isTerminal } from './format';
import {
  ArtifactCopy,
  ArtifactsCopy,
  Event,
  JobRecord,
  JobRequest,
  PackPlan,
  SendDefaults,
  ServerConfig
} from './models';
import {
  downloadUrl,
  nextCursor,
  requestAPI,
  requestAPIWithHeaders
} from './request';

const jsonPost = (body: unknown): RequestInit => ({
  method: 'POST',
  body: JSON.stringify(body)
});

const job = (id: string, tail = ''): string =>
  `jobs/${encodeURIComponent(id)}${tail}`;

const artifact = (id: string, name: string, tail = ''): string =>
  job(id, `/artifacts/${URLExt.encodeParts(name)}${tail}`);

/** One page of the job list, newest first; `next` is the cursor of the page after it. */
export interface IJobsPage {
  jobs: JobRecord[];
  next: string | null;
}

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
  /** At most `limit` jobs, newest first, older than the cursor `before` (from a `next`). */
  page: async (limit: number, before?: string | null): Promise<IJobsPage> => {
    const query = new URLSearchParams({ limit: String(limit) });
    if (before) {
      query.set('before', before);
    }
    const { data, headers } = await requestAPIWithHeaders<JobRecord[]>(
      `jobs?${query.toString()}`
    );
    return { jobs: data, next: nextCursor(headers.get('Link')) };
  },
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
    requestAPI<ArtifactCopy>(artifact(id, name, '/copy'), { method: 'POST' }),
  /** "Copy all": every artifact into the project's j2c-outputs/<id>/, the failures named. */
  copyAllArtifacts: (id: string): Promise<ArtifactsCopy> =>
    requestAPI<ArtifactsCopy>(job(id, '/copy-artifacts'), { method: 'POST' })
};

/** Poll faster while something runs: statuses change and users watch. */
const ACTIVE_INTERVAL_MS = 2000;
const IDLE_INTERVAL_MS = 15000;
const MAX_BACKOFF_MS = 60000;

/** The server's default page, and its cap (`registry_paging.MAX_JOBS_LIMIT`). */
export const DEFAULT_PAGE_SIZE = 200;
const MAX_PAGE_SIZE = 1000;

/** Jobs ordered as the server pages them: created_at, then id, both descending. */
function isOlder(a: JobRecord, b: JobRecord): boolean {
  return a.created_at !== b.created_at
    ? a.created_at < b.created_at
    : a.id < b.id;
}

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
      // Hidden, it still polls while a job is active: its end raises a browser notification.
      standby: () => document.hidden && !this.active.length
    });
  }

  /** The jobs loaded (the newest page, and the older pages asked for), newest first. */
  get jobs(): readonly JobRecord[] {
    return this._jobs;
  }

  /** Jobs asked for per page (the `jobsPageSize` setting). */
  get pageSize(): number {
    return this._pageSize;
  }

  /** A new page size starts again from the newest page alone. */
  set pageSize(size: number) {
    const clamped = Math.min(
      MAX_PAGE_SIZE,
      Math.max(1, Math.floor(size) || DEFAULT_PAGE_SIZE)
    );
    if (clamped === this._pageSize) {
      return;
    }
    this._pageSize = clamped;
    this._generation++;
    this._extended = false;
    this._olderError = null;
    void this.refresh();
  }

  /** Whether the server has jobs older than those loaded. */
  get hasOlder(): boolean {
    return this._next !== null;
  }

  /** Whether an older page is being loaded. */
  get loadingOlder(): boolean {
    return this._loadingOlder;
  }

  /** Why the last older page failed to load (the message), else null. */
  get olderError(): string | null {
    return this._olderError;
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

  /**
   * Load the page after the oldest job loaded and keep it (and every older page loaded)
   * below the newest page while that one refreshes.
   */
  async loadOlder(): Promise<void> {
    const cursor = this._next;
    if (cursor === null || this._loadingOlder) {
      return;
    }
    const generation = this._generation;
    this._loadingOlder = true;
    this._olderError = null;
    this._changed.emit();
    try {
      const page = await jobsApi.page(this._pageSize, cursor);
      if (generation !== this._generation) {
        return; // the page size changed meanwhile: the list starts again from the top
      }
      const last = this._jobs[this._jobs.length - 1];
      const known = new Set(this._jobs.map(record => record.id));
      // A job can only be older than the last one loaded; the check keeps a refresh that
      // raced this request from ever showing one twice.
      const older = page.jobs.filter(
        record => !known.has(record.id) && (!last || isOlder(record, last))
      );
      this._jobs = [...this._jobs, ...older];
      this._next = page.next;
      this._extended = true;
    } catch (error) {
      this._olderError = error instanceof Error ? error.message : String(error);
    } finally {
      this._loadingOlder = false;
      this._changed.emit();
    }
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

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _load(): Promise<void> {
    try {
      const size = this._pageSize;
      const page = await jobsApi.page(size);
      if (size !== this._pageSize) {
        return; // the page size changed meanwhile: its own refresh follows
      }
      this._error = null;
      this._replace(this._merge(page));
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (message !== this._error) {
        this._error = message;
        this._changed.emit();
      }
      throw error; // the Poll backs off
    }
  }

  /**
   * The newest page is the truth down to its last job (a job gone from it was removed);
   * below it stay the older jobs loaded before, which the newest page pushed down as new
   * jobs arrived. New jobs only ever come in at the top, so the two meet without a gap.
   */
  private _merge(page: IJobsPage): JobRecord[] {
    const keepOlder = this._extended || this._loadingOlder;
    const tail = page.jobs[page.jobs.length - 1];
    if (!keepOlder || page.next === null || !tail) {
      this._next = page.next;
      this._extended = false;
      return page.jobs;
    }
    const inPage = new Set(page.jobs.map(record => record.id));
    const older = this._jobs.filter(
      record => !inPage.has(record.id) && isOlder(record, tail)
    );
    if (!older.length) {
      this._next = page.next;
    }
    return [...page.jobs, ...older];
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
  private _pageSize = DEFAULT_PAGE_SIZE;
  /** The cursor of the page after the oldest job loaded; null: there is none. */
  private _next: string | null = null;
  /** Whether older pages were asked for (then they stay below the newest page). */
  private _extended = false;
  private _loadingOlder = false;
  /** Counts page-size changes: an older page asked for before one is dropped. */
  private _generation = 0;
  private _olderError: string | null = null;
  private _error: string | null = null;
  private _loaded = false;
  private readonly _changed = new Signal<this, void>(this);
  private readonly _ended = new Signal<this, JobRecord>(this);
}
