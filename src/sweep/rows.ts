/**
 * The sweep view's pure rules, kept apart from the widgets (and tested apart from them): which
 * columns the table has, how each sorts, which metrics there are, and the plot's series —
 * metric against a swept parameter, or metric over steps per variant when runs logged history.
 */
import { jobSeconds } from '../format';
import { JobStatus, SweepVariant, SweepView } from '../models';

/** A column of the variant table: a fixed one, a swept parameter or a metric. */
export type SweepColumn =
  | { kind: 'index' }
  | { kind: 'status' }
  | { kind: 'duration' }
  | { kind: 'exit' }
  | { kind: 'param'; name: string }
  | { kind: 'metric'; name: string };

export type SortDirection = 'ascending' | 'descending';

export interface ISweepSort {
  column: SweepColumn;
  direction: SortDirection;
}

/** The plot's x: a swept parameter, or the step (one line per variant). */
export type PlotAxis = { kind: 'param'; name: string } | { kind: 'step' };

export interface IPlotPoint {
  x: number | string;
  /** How x reads (a swept value as written in the grid: "3e-4"). */
  xLabel: string;
  y: number;
  /** The variant it belongs to (its row opens that variant's log). */
  index: number;
}

export interface IPlotSeries {
  /** E.g. "lr=1e-3 seed=0" for a line per variant; the metric's name for a scatter. */
  label: string;
  index: number | null;
  points: IPlotPoint[];
}

export interface IPlotData {
  axis: PlotAxis;
  metric: string;
  /** Whether every x is a number (then a linear or log scale), else categories. */
  numericX: boolean;
  /** Whether the numbers span a decade or more, all above 0 (e.g. learning rates). */
  logX: boolean;
  series: IPlotSeries[];
}

/** Every point of every series (the UI's ES target has no `flatMap`). */
export function allPoints(series: readonly IPlotSeries[]): IPlotPoint[] {
  return ([] as IPlotPoint[]).concat(...series.map(s => s.points));
}

export const columnKey = (column: SweepColumn): string =>
  column.kind === 'param' || column.kind === 'metric'
    ? `${column.kind}:${column.name}`
    : column.kind;

export function sameColumn(a: SweepColumn, b: SweepColumn): boolean {
  return columnKey(a) === columnKey(b);
}

/** The order statuses read in, from done to waiting (a sort by status groups them so). */
const STATUS_ORDER: JobStatus[] = [
  'succeeded',
  'failed',
  'cancelled',
  'lost',
  'cancelling',
  'running',
  'submitted',
  'queued',
  'uploading',
  'packing',
  'pending'
];

/** The value a column sorts by; null sorts last in either direction. */
export function sortValue(
  variant: SweepVariant,
  column: SweepColumn
): number | string | null {
  switch (column.kind) {
    case 'index':
      return variant.index;
    case 'status':
      return STATUS_ORDER.indexOf(variant.job.status);
    case 'duration':
      return variant.job.started_at ? jobSeconds(variant.job) : null;
    case 'exit':
      return variant.job.exit_code ?? null;
    case 'param':
      return paramValue(variant.params?.[column.name]);
    case 'metric':
      return variant.metrics?.[column.name] ?? null;
  }
}

/** A parameter's value as a number when it reads as one ("3e-4" → 0.0003), else the text. */
export function paramValue(text: string | undefined): number | string | null {
  if (text === undefined) {
    return null;
  }
  const number = Number(text);
  return text.trim() !== '' && Number.isFinite(number) ? number : text;
}

function compare(a: number | string, b: number | string): number {
  if (typeof a === 'number' && typeof b === 'number') {
    return a - b;
  }
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

/** The variants sorted by `sort` (stable: ties keep the variant order). */
export function sortVariants(
  variants: readonly SweepVariant[],
  sort: ISweepSort
): SweepVariant[] {
  const sign = sort.direction === 'ascending' ? 1 : -1;
  return [...variants].sort((a, b) => {
    const x = sortValue(a, sort.column);
    const y = sortValue(b, sort.column);
    if (x === null || y === null) {
      return x === y ? a.index - b.index : x === null ? 1 : -1;
    }
    return sign * compare(x, y) || a.index - b.index;
  });
}

/** Every metric some variant has, sorted by name. */
export function metricNames(view: SweepView | null): string[] {
  const names = new Set<string>();
  for (const variant of view?.variants ?? []) {
    for (const name of Object.keys(variant.metrics ?? {})) {
      names.add(name);
    }
  }
  return [...names].sort();
}

/** Whether some variant logged `metric` at more than one step. */
export function hasHistory(view: SweepView | null, metric: string): boolean {
  return (view?.variants ?? []).some(
    variant => (variant.history?.[metric]?.length ?? 0) > 1
  );
}

export function variantLabel(variant: SweepVariant, keys: string[]): string {
  const parts = keys
    .filter(key => variant.params?.[key] !== undefined)
    .map(key => `${key}=${variant.params?.[key]}`);
  return parts.length ? parts.join(' ') : `#${variant.index}`;
}

/**
 * What the plot draws. Against a parameter: one point per variant that has the metric, and
 * when other parameters were swept too, one series per combination of them (so "lr" with
 * "seed" reads as one line per seed). Over steps: one line per variant with history.
 */
export function plotData(
  view: SweepView | null,
  metric: string,
  axis: PlotAxis
): IPlotData {
  const variants = view?.variants ?? [];
  const keys = view?.keys ?? [];
  const series: IPlotSeries[] = [];
  if (axis.kind === 'step') {
    for (const variant of variants) {
      const history = variant.history?.[metric] ?? [];
      if (history.length) {
        series.push({
          label: variantLabel(variant, keys),
          index: variant.index,
          points: history.map(point => ({
            x: point.step,
            xLabel: String(point.step),
            y: point.value,
            index: variant.index
          }))
        });
      }
    }
  } else {
    const others = keys.filter(key => key !== axis.name);
    const groups = new Map<string, IPlotSeries>();
    for (const variant of variants) {
      const y = variant.metrics?.[metric];
      const raw = variant.params?.[axis.name];
      if (y === undefined || raw === undefined) {
        continue;
      }
      const label =
        others
          .filter(key => variant.params?.[key] !== undefined)
          .map(key => `${key}=${variant.params?.[key]}`)
          .join(' ') || metric;
      const group = groups.get(label) ?? { label, index: null, points: [] };
      groups.set(label, group);
      group.points.push({
        x: paramValue(raw) ?? raw,
        xLabel: raw,
        y,
        index: variant.index
      });
    }
    for (const group of groups.values()) {
      group.points.sort((a, b) => compare(a.x, b.x));
      series.push(group);
    }
  }
  const xs = allPoints(series).map(p => p.x);
  const numericX = xs.every(x => typeof x === 'number');
  const numbers = xs as number[];
  const logX =
    axis.kind === 'param' &&
    numericX &&
    numbers.length > 1 &&
    numbers.every(x => x > 0) &&
    // A decade or more (1e-4 to 1e-3 is 9.99… in floating point).
    Math.max(...numbers) / Math.min(...numbers) >= 10 * (1 - 1e-9);
  return { axis, metric, numericX, logX, series };
}

/** A number as the table and the plot's text read it: 4 significant digits. */
export function formatMetric(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return '';
  }
  return Number.isInteger(value) ? String(value) : value.toPrecision(4);
}

/** The plot's text alternative: the same numbers, one series after another. */
export function describePlot(data: IPlotData): string {
  const x = data.axis.kind === 'step' ? 'step' : data.axis.name;
  if (!data.series.length) {
    return `${data.metric} against ${x}: no values yet.`;
  }
  const parts = data.series.map(series => {
    const points = series.points
      .map(point => `${x} ${point.xLabel}: ${formatMetric(point.y)}`)
      .join(', ');
    return `${series.label}: ${points}`;
  });
  return `${data.metric} against ${x}. ${parts.join('; ')}.`;
}
