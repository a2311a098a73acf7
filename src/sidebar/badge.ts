/**
 * `EndedBadge`: the count on the Compute tab of jobs that ended since the user last looked
 * (the sidebar shown in a visible tab). The ended jobs seen are kept per server in
 * localStorage, so jobs that end while the Lab is closed count when it opens again.
 */
import { PageConfig } from '@jupyterlab/coreutils';
import { TranslationBundle } from '@jupyterlab/translation';
import { Title, Widget } from '@lumino/widgets';

import { isTerminal } from '../format';
import { sweepOf } from '../sweep/records';
import { JobsModel } from '../jobs';

/** The tab's dataset key (`data-j2c-ended`) holding the count. */
export const BADGE_KEY = 'j2c-ended';

function storageKey(): string {
  return `j2c:seen-ended:${PageConfig.getBaseUrl()}`;
}

function readSeen(): Set<string> | null {
  try {
    const raw = window.localStorage.getItem(storageKey());
    const ids: unknown = raw === null ? null : JSON.parse(raw);
    return Array.isArray(ids)
      ? new Set(ids.filter((id): id is string => typeof id === 'string'))
      : null;
  } catch {
    return null; // storage refused (private mode) or garbled: start afresh
  }
}

function writeSeen(seen: Set<string>): void {
  try {
    window.localStorage.setItem(storageKey(), JSON.stringify([...seen]));
  } catch {
    // storage refused: the badge still works for this page
  }
}

export class EndedBadge {
  constructor(
    private readonly _jobs: JobsModel,
    private readonly _title: Title<Widget>,
    private readonly _trans: TranslationBundle,
    private readonly _looking: () => boolean
  ) {
    this._caption = _title.caption;
    this._seen = readSeen();
    _jobs.changed.connect(() => this.update(), this);
    this.update();
  }

  /** Jobs ended (of those loaded) that the user has not seen ended yet. */
  get count(): number {
    return this._count;
  }

  /** Recount; while the user looks, every ended job loaded counts as seen. */
  update(): void {
    if (!this._jobs.loaded) {
      return;
    }
    // A sweep counts once (its parent), as the list shows it: not once per variant.
    const ended = this._jobs.jobs
      .filter(
        record => isTerminal(record.status) && sweepOf(record)?.role !== 'child'
      )
      .map(record => record.id);
    if (this._seen === null || this._looking()) {
      // The first visit counts nothing of the past; looking sees everything.
      this._remember(ended);
    }
    const seen = this._seen ?? new Set<string>();
    this._show(ended.filter(id => !seen.has(id)).length);
  }

  /** Keep the ids of the ended jobs loaded (older ones no longer show anywhere). */
  private _remember(ended: string[]): void {
    const next = new Set(ended);
    const previous = this._seen;
    if (
      previous === null ||
      previous.size !== next.size ||
      ended.some(id => !previous.has(id))
    ) {
      this._seen = next;
      writeSeen(next);
    }
  }

  private _show(count: number): void {
    if (count === this._count) {
      return;
    }
    this._count = count;
    const title = this._title;
    if (count) {
      title.dataset = { ...title.dataset, [BADGE_KEY]: String(count) };
      title.caption = this._trans._n(
        '%2: %1 job ended since you last looked',
        '%2: %1 jobs ended since you last looked',
        count,
        this._caption
      );
    } else {
      const dataset = { ...title.dataset };
      delete dataset[BADGE_KEY];
      title.dataset = dataset;
      title.caption = this._caption;
    }
  }

  private readonly _caption: string;
  private _seen: Set<string> | null;
  private _count = 0;
}
