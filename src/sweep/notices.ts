/**
 * `SweepNotices`: one notification per sweep, updated in place (`Notification.update`) as its
 * variants end ("Sweep train.py (877dd3): 3/6 succeeded, 1 running, 2 queued"), and when the
 * sweep ends, its outcome ("6 of 6 succeeded; best accuracy 0.51 (lr=0.5, seed=1)") with an
 * action to open the sweep view. Never one notification per variant.
 */
import { Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';

import { shortId } from '../format';
import { JobRecord, JobStatus } from '../models';
import { SweepFetcher, fetchSweep } from './model';
import { sweepOutcome } from './outcome';

const ENDED_TYPE: { [status in JobStatus]?: Notification.TypeOptions } = {
  succeeded: 'success',
  failed: 'error',
  lost: 'error',
  cancelled: 'warning'
};

/** How long the outcome stays on screen (the progress stays until the sweep ends). */
const OUTCOME_MS = 10000;

export class SweepNotices {
  constructor(options: SweepNotices.IOptions) {
    this._trans = options.trans;
    this._fetch = options.fetch ?? fetchSweep;
    this._preferredMetric = options.preferredMetric;
    this._openSweep = options.openSweep;
  }

  /** A variant of sweep `parentId` ended: the sweep's notification says how far it is. */
  variantEnded(parentId: string, parent: JobRecord | undefined): void {
    if (this._ended.has(parentId)) {
      return;
    }
    const trans = this._trans;
    const progress = parent?.sweep?.summary;
    const message = trans.__(
      'Sweep %1: %2',
      this._title(parentId, parent),
      progress || trans.__('a variant ended')
    );
    const options = {
      autoClose: false as const,
      actions: this._actions(parentId)
    };
    const id = this._ids.get(parentId);
    if (id !== undefined) {
      // Dismissed by the user: the progress stays away until the outcome.
      Notification.update({ id, message, type: 'in-progress', ...options });
      return;
    }
    this._ids.set(parentId, Notification.emit(message, 'in-progress', options));
  }

  /** The sweep ended: its notification (the same one, else a new one) gives the outcome. */
  async sweepEnded(parent: JobRecord): Promise<void> {
    if (this._ended.has(parent.id)) {
      return;
    }
    this._ended.add(parent.id);
    const trans = this._trans;
    let outcome = parent.sweep?.summary ?? '';
    try {
      outcome = sweepOutcome(
        await this._fetch(parent.id),
        this._preferredMetric(),
        trans
      );
    } catch {
      // The sweep's view is gone or unreachable: the record's own summary says enough.
    }
    const message = trans.__(
      'Sweep %1 %2: %3',
      this._title(parent.id, parent),
      parent.status,
      outcome
    );
    const type = ENDED_TYPE[parent.status] ?? 'info';
    const options = {
      autoClose: OUTCOME_MS,
      actions: this._actions(parent.id)
    };
    const id = this._ids.get(parent.id);
    if (
      id === undefined ||
      !Notification.update({ id, message, type, ...options })
    ) {
      this._ids.set(parent.id, Notification.emit(message, type, options));
    }
  }

  /** "train.py (877dd3)": the sweep's name and short id. */
  private _title(parentId: string, parent: JobRecord | undefined): string {
    return `${parent?.name ?? parentId} (${shortId(parentId)})`;
  }

  private _actions(parentId: string): Notification.IAction[] {
    return [
      {
        label: this._trans.__('Open sweep view'),
        callback: () => this._openSweep(parentId)
      }
    ];
  }

  private readonly _trans: TranslationBundle;
  private readonly _fetch: SweepFetcher;
  private readonly _preferredMetric: () => string;
  private readonly _openSweep: (parentId: string) => void;
  /** Each sweep's notification id. */
  private readonly _ids = new Map<string, string>();
  /** Sweeps whose outcome was given: a late variant's end changes nothing. */
  private readonly _ended = new Set<string>();
}

export namespace SweepNotices {
  export interface IOptions {
    trans: TranslationBundle;
    /** The metric the outcome names first (the `listMetric` setting). */
    preferredMetric: () => string;
    openSweep: (parentId: string) => void;
    fetch?: SweepFetcher;
  }
}
