/**
 * `SweepModel`: the state of one sweep's view, outside React — the sweep as the server answers
 * it (`GET /j2c/api/jobs/{id}/sweep`), refreshed while a variant is still active; the table's
 * sort, the chosen metric and the plot's x axis. The widgets only render it and call its setters.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { isTerminal } from '../format';
import { SweepVariant, SweepView } from '../models';
import { requestAPI } from '../request';
import {
  IPlotData,
  ISweepSort,
  PlotAxis,
  SweepColumn,
  hasHistory,
  metricNames,
  plotData,
  sameColumn,
  sortVariants
} from './rows';

/** The route's client (a function, so a test can answer for the server). */
export type SweepFetcher = (parentId: string) => Promise<SweepView>;

export const fetchSweep: SweepFetcher = parentId =>
  requestAPI<SweepView>(`jobs/${encodeURIComponent(parentId)}/sweep`);

const ACTIVE_INTERVAL_MS = 2000;
const MAX_BACKOFF_MS = 60000;

export class SweepModel implements IDisposable {
  constructor(options: SweepModel.IOptions) {
    this.parentId = options.parentId;
    this._fetch = options.fetch ?? fetchSweep;
    this._preferredMetric = options.preferredMetric ?? '';
    this._poll = new Poll({
      name: `j2c:sweep:${options.parentId}`,
      factory: () => this._load(),
      frequency: {
        interval: ACTIVE_INTERVAL_MS,
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      // Once every variant has ended nothing changes. Hidden, it still polls a running sweep
      // (as the jobs list polls active jobs): its end is what the user waits for.
      standby: () => this._settled
    });
  }

  readonly parentId: string;

  /** The sweep as last answered, or null before the first answer. */
  get view(): SweepView | null {
    return this._view;
  }

  /** Why the last refresh failed (the message), else null. */
  get error(): string | null {
    return this._error;
  }

  get sort(): ISweepSort {
    return this._sort;
  }

  /** The metric the table highlights and the plot draws ('' while there is none). */
  get metric(): string {
    const names = this.metrics;
    if (this._metric && names.includes(this._metric)) {
      return this._metric;
    }
    return names.includes(this._preferredMetric)
      ? this._preferredMetric
      : (names[0] ?? '');
  }

  /** Every metric some variant reports. */
  get metrics(): string[] {
    return metricNames(this._view);
  }

  /** The axes the plot can take: each swept name, and steps when some run logged history. */
  get axes(): PlotAxis[] {
    const axes: PlotAxis[] = (this._view?.keys ?? []).map(name => ({
      kind: 'param',
      name
    }));
    if (hasHistory(this._view, this.metric)) {
      axes.push({ kind: 'step' });
    }
    return axes;
  }

  /** The plot's x: as chosen while it is still offered, else the first swept name. */
  get axis(): PlotAxis | null {
    const axes = this.axes;
    const chosen = this._axis;
    const found = chosen
      ? axes.find(
          axis =>
            axis.kind === chosen.kind &&
            (axis.kind === 'step' ||
              (chosen.kind === 'param' && axis.name === chosen.name))
        )
      : undefined;
    return found ?? axes[0] ?? null;
  }

  /** The variants in the table's order. */
  get rows(): SweepVariant[] {
    return sortVariants(this._view?.variants ?? [], this._sort);
  }

  get plot(): IPlotData | null {
    const axis = this.axis;
    const metric = this.metric;
    return axis && metric ? plotData(this._view, metric, axis) : null;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Sort by `column`: ascending first, the other way on a second click of the same column. */
  sortBy(column: SweepColumn): void {
    const again = sameColumn(this._sort.column, column);
    this._sort = {
      column,
      direction:
        again && this._sort.direction === 'ascending'
          ? 'descending'
          : 'ascending'
    };
    this._changed.emit();
  }

  setMetric(name: string): void {
    this._metric = name;
    this._changed.emit();
  }

  setAxis(axis: PlotAxis): void {
    this._axis = axis;
    this._changed.emit();
  }

  /** Reload now (and poll again if it had settled: e.g. after a re-send). */
  refresh(): Promise<void> {
    this._settled = false;
    return this._poll.refresh();
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _load(): Promise<void> {
    try {
      const view = await this._fetch(this.parentId);
      this._view = view;
      this._error = null;
      // Ended with every variant: nothing changes any more, the poll stands by.
      this._settled =
        isTerminal(view.parent.status) &&
        (view.variants ?? []).every(variant => isTerminal(variant.job.status));
    } catch (error) {
      this._error = error instanceof Error ? error.message : String(error);
      this._changed.emit();
      throw error; // the Poll backs off
    }
    this._changed.emit();
  }

  private readonly _fetch: SweepFetcher;
  private readonly _preferredMetric: string;
  private readonly _poll: Poll;
  private _view: SweepView | null = null;
  private _error: string | null = null;
  private _settled = false;
  private _sort: ISweepSort = {
    column: { kind: 'index' },
    direction: 'ascending'
  };
  private _metric = '';
  private _axis: PlotAxis | null = null;
  private readonly _changed = new Signal<this, void>(this);
}

export namespace SweepModel {
  export interface IOptions {
    parentId: string;
    /** The `listMetric` setting: the metric shown first when the variants report it. */
    preferredMetric?: string;
    fetch?: SweepFetcher;
  }
}
