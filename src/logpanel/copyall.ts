/**
 * `CopyAllModel`: the state of one job's "Copy all" action, outside React — whether a copy is
 * running, the server's answer (the folder, each file copied, each file not copied with why)
 * or why the request itself failed. The results view only renders it and calls `run`.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { jobsApi } from '../jobs';
import { ArtifactsCopy } from '../models';

/** The route's client (a function, so a test can answer for the server). */
export type CopyAllFetcher = (jobId: string) => Promise<ArtifactsCopy>;

export type CopyAllState = 'idle' | 'copying' | 'done' | 'failed';

export class CopyAllModel {
  constructor(options: CopyAllModel.IOptions) {
    this.jobId = options.jobId;
    this._fetch = options.fetch ?? jobsApi.copyAllArtifacts;
  }

  readonly jobId: string;

  get state(): CopyAllState {
    return this._state;
  }

  /** The last answer: where the files went, which were copied and which were not. */
  get result(): ArtifactsCopy | null {
    return this._result;
  }

  /** Why the request failed as a whole (the job is gone, still running...), else null. */
  get error(): string | null {
    return this._error;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Copy every artifact; a second call while one runs does nothing. */
  async run(): Promise<void> {
    if (this._state === 'copying') {
      return;
    }
    this._set('copying', null, null);
    try {
      this._set('done', await this._fetch(this.jobId), null);
    } catch (error) {
      this._set('failed', null, String((error as Error).message ?? error));
    }
  }

  private _set(
    state: CopyAllState,
    result: ArtifactsCopy | null,
    error: string | null
  ): void {
    this._state = state;
    this._result = result;
    this._error = error;
    this._changed.emit();
  }

  private readonly _fetch: CopyAllFetcher;
  private _state: CopyAllState = 'idle';
  private _result: ArtifactsCopy | null = null;
  private _error: string | null = null;
  private readonly _changed = new Signal<this, void>(this);
}

export namespace CopyAllModel {
  export interface IOptions {
    jobId: string;
    fetch?: CopyAllFetcher;
  }
}
