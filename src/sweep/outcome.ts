/**
 * A sweep's outcome in one sentence, for its one notification: "6 of 6 succeeded; best
 * accuracy 0.51 (lr=0.5, seed=1)", the failed variants named by their values. Pure rules, kept
 * apart from the notifications that show them.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { SweepVariant, SweepView } from '../models';
import { metricNames } from './rows';

/** Failed variants named in the sentence; the rest are counted. */
const FAILURES_NAMED = 3;

/** Metrics where lower is better (a loss, an error, a time); any other: higher is better. */
const LOWER_IS_BETTER = /loss|err|mse|mae|perplexity|time|latency|seconds/i;

/** Metrics that say how good a run is, chosen before others when none is preferred. */
const QUALITY = /acc|f1|auc|precision|recall|score|r2/i;

/** The metric the sentence names: the preferred one if reported, else a quality metric. */
export function headlineMetric(view: SweepView, preferred: string): string {
  const names = metricNames(view);
  if (preferred && names.includes(preferred)) {
    return preferred;
  }
  return names.find(name => QUALITY.test(name)) ?? names[0] ?? '';
}

/** "lr=0.5, seed=1": a variant by its swept values, in the sweep's order. */
export function variantValues(variant: SweepVariant, keys: string[]): string {
  const parts = keys
    .filter(key => variant.params?.[key] !== undefined)
    .map(key => `${key}=${variant.params?.[key]}`);
  return parts.length ? parts.join(', ') : `#${variant.index}`;
}

/** 0.51234 → "0.512"; integers as they are. */
function short(value: number): string {
  return Number.isInteger(value)
    ? String(value)
    : String(+value.toPrecision(3));
}

/** The succeeded variant with the best value of `metric`, if any reported it. */
export function bestVariant(
  variants: readonly SweepVariant[],
  metric: string
): SweepVariant | null {
  const lower = LOWER_IS_BETTER.test(metric);
  let best: SweepVariant | null = null;
  for (const variant of variants) {
    const value = variant.metrics?.[metric];
    if (variant.job.status !== 'succeeded' || typeof value !== 'number') {
      continue;
    }
    const current = best?.metrics?.[metric];
    if (current === undefined || (lower ? value < current : value > current)) {
      best = variant;
    }
  }
  return best;
}

export function sweepOutcome(
  view: SweepView,
  preferredMetric: string,
  trans: TranslationBundle
): string {
  const variants = view.variants ?? [];
  const keys = view.keys ?? [];
  const total = variants.length || view.parent.sweep?.size || 0;
  const succeeded = variants.filter(v => v.job.status === 'succeeded').length;
  const parts = [trans.__('%1 of %2 succeeded', succeeded, total)];
  const failed = variants.filter(
    v => v.job.status === 'failed' || v.job.status === 'lost'
  );
  if (failed.length) {
    const named = failed
      .slice(0, FAILURES_NAMED)
      .map(v => variantValues(v, keys))
      .join('; ');
    const more = failed.length > FAILURES_NAMED ? '; …' : '';
    parts.push(
      trans._n(
        '%1 failed (%2)',
        '%1 failed (%2)',
        failed.length,
        `${named}${more}`
      )
    );
  }
  const cancelled = variants.filter(v => v.job.status === 'cancelled').length;
  if (cancelled) {
    parts.push(trans._n('%1 cancelled', '%1 cancelled', cancelled));
  }
  const metric = headlineMetric(view, preferredMetric);
  const best = metric ? bestVariant(variants, metric) : null;
  const value = best?.metrics?.[metric];
  if (best && typeof value === 'number') {
    parts.push(
      trans.__(
        'best %1 %2 (%3)',
        metric,
        short(value),
        variantValues(best, keys)
      )
    );
  }
  return parts.join('; ');
}
