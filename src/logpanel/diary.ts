/**
 * `JobDiary`: j2c's own account of a job — its stage and status events and the diagnostic
 * lines of the job's runner (j2c-unpack) — filed under the timeline step it belongs to, so the
 * log panel shows one line per step, each expandable to its entries, and keeps the job's
 * output for the job's own lines. Which parts are unfolded is kept here too (UI state apart
 * from the widgets that render it).
 */
import { ISignal, Signal } from '@lumino/signaling';

import { Event } from '../models';
import { ILineKind, LineLevel, j2cText } from './lines';
import { StepName } from './progress';

export interface IDiaryEntry {
  seq: number;
  time: number;
  text: string;
  level: LineLevel;
}

/** Entries kept per step; older ones are counted (the downloaded log has every line). */
const KEPT_PER_STEP = 1000;

/** The step a pipeline stage's events belong to. */
const STAGE_STEP: { [stage: string]: StepName } = {
  scan: 'scan',
  pack: 'pack',
  upload: 'upload',
  configure: 'submit',
  submit: 'submit',
  watch: 'running',
  results: 'results'
};

/** The runner's phases that report on the results: filed under that step, not the run's. */
const RESULTS_PHASES: ReadonlySet<string> = new Set([
  'outputs',
  'uploading outputs',
  'summary',
  'tracking'
]);

/** The step a status event opens (its diary lines that follow go there too). */
const STATUS_STEP: { [status: string]: StepName } = {
  pending: 'scan',
  packing: 'pack',
  uploading: 'upload',
  submitted: 'submit',
  queued: 'queued',
  running: 'running',
  cancelling: 'running',
  succeeded: 'results',
  failed: 'results',
  cancelled: 'results',
  lost: 'results'
};

function seconds(data: Event['data']): string {
  const value = data?.seconds;
  return typeof value === 'number' ? ` ${value.toFixed(1)} s` : '';
}

export class JobDiary {
  /** How many entries the diary holds (dropped ones included). */
  get count(): number {
    return this._count;
  }

  /** A step's entries, oldest first (at most the newest 1,000). */
  entries(step: StepName): readonly IDiaryEntry[] {
    return this._entries.get(step) ?? [];
  }

  /** Entries of `step` no longer kept (the downloaded log has them). */
  dropped(step: StepName): number {
    return this._dropped.get(step) ?? 0;
  }

  /** The worst level among a step's entries ('info' when none is worse). */
  worst(step: StepName): LineLevel {
    const levels = this.entries(step).map(entry => entry.level);
    return levels.includes('error')
      ? 'error'
      : levels.includes('warning')
        ? 'warning'
        : 'info';
  }

  /** Whether the diary (one line per step) is unfolded. */
  get open(): boolean {
    return this._open;
  }

  /** Whether a step's entries are unfolded. */
  isOpen(step: StepName): boolean {
    return this._openSteps.has(step);
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  toggle(): void {
    this._open = !this._open;
    this._changed.emit();
  }

  toggleStep(step: StepName): void {
    if (!this._openSteps.delete(step)) {
      this._openSteps.add(step);
    }
    this._changed.emit();
  }

  /** Unfold the diary at `step` (a failed job's: where it went wrong). */
  reveal(step: StepName): void {
    this._open = true;
    this._openSteps.add(step);
    this._changed.emit();
  }

  /** File j2c's part of one event; the job's own lines and progress ticks are not j2c's diary. */
  apply(event: Event): void {
    switch (event.kind) {
      case 'stage': {
        const step = event.stage ? STAGE_STEP[event.stage] : undefined;
        if (!step) {
          return;
        }
        if (event.state === 'started') {
          this._current = step;
        }
        const text = event.text ? `: ${event.text}` : '';
        this._add(
          step,
          event,
          `${event.stage} ${event.state}${seconds(event.data)}${text}`,
          event.state === 'failed' ? 'error' : 'info'
        );
        return;
      }
      case 'status': {
        const step = STATUS_STEP[event.status ?? ''] ?? this._current;
        this._current = step;
        const text = event.text ? `: ${event.text}` : '';
        // A failure is the failed step's (and the panel's top): the status itself is news.
        this._add(step, event, `${event.status}${text}`, 'info');
        return;
      }
      case 'error':
        this._add(this._current, event, event.text ?? '', 'error');
        return;
      case 'result':
        this._add('results', event, event.text ?? '', 'info');
        return;
      default:
        return;
    }
  }

  /**
   * One of j2c's lines from the job's log: under the step its phase reports on (the outputs
   * and the summary: Results), else the step going on.
   */
  line(event: Event, kind: ILineKind): void {
    const step = RESULTS_PHASES.has(kind.phase) ? 'results' : this._current;
    this._add(step, event, j2cText(event, kind), kind.level);
  }

  private _add(
    step: StepName,
    event: Event,
    text: string,
    level: LineLevel
  ): void {
    let entries = this._entries.get(step);
    if (!entries) {
      entries = [];
      this._entries.set(step, entries);
    }
    entries.push({ seq: event.seq, time: event.time, text, level });
    if (entries.length > KEPT_PER_STEP) {
      entries.shift();
      this._dropped.set(step, this.dropped(step) + 1);
    }
    this._count += 1;
  }

  private readonly _entries = new Map<StepName, IDiaryEntry[]>();
  private readonly _dropped = new Map<StepName, number>();
  private _count = 0;
  private _current: StepName = 'scan';
  private _open = false;
  private readonly _openSteps = new Set<StepName>();
  private readonly _changed = new Signal<this, void>(this);
}
