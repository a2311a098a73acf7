/**
 * What a job row of the jobs list says, and the list's filter: the rules (pure functions) and
 * the filter's state (`JobsFilter`), kept apart from the widget that renders them.
 *
 * A row tells jobs of the same script apart: its entry point, its arguments (a sweep: each
 * swept name with its values) and the short id.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { shortId } from '../format';
import { JobRecord } from '../models';
import { joinArgs } from './values';

export interface IJobSummary {
  /** The display name (by default the entry point's file name). */
  name: string;
  /** The entry point, when the name does not already say it ('' otherwise). */
  entry: string;
  /** The arguments as a command line, or a sweep's names and values. */
  detail: string;
  short: string;
}

/** The entry point as the user chose it: relative to the project, or `-m module`. */
export function entryOf(record: JobRecord): string {
  const call = record.request.call_path;
  const project = record.request.code_path.replace(/\/+$/, '');
  return call.startsWith(`${project}/`) ? call.slice(project.length + 1) : call;
}

/** A sweep's grid as "lr = 0.5, 0.05 · seed = 0, 1"; a variant's own values "lr=0.5 seed=1". */
function sweepText(record: JobRecord): string | null {
  const info = record.sweep;
  if (!info) {
    return null;
  }
  if (info.parent) {
    return Object.entries(info.params ?? {})
      .map(([name, value]) => `${name}=${value}`)
      .join(' ');
  }
  const grid = record.request.sweep?.grid ?? {};
  const swept = Object.entries(grid).map(
    ([name, values]) => `${name} = ${values.join(', ')}`
  );
  return swept.length ? swept.join(' · ') : null;
}

export function summarize(record: JobRecord): IJobSummary {
  const entry = entryOf(record);
  const named = entry === record.name || entry.endsWith(`/${record.name}`);
  return {
    name: record.name,
    entry: named ? '' : entry,
    detail: sweepText(record) ?? joinArgs(record.request.args ?? []),
    short: shortId(record.id)
  };
}

/**
 * Whether the row of `record` matches what the user typed: every word must appear in its name,
 * entry point, arguments, id or status (case-insensitive).
 */
export function matchesFilter(record: JobRecord, text: string): boolean {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) {
    return true;
  }
  const summary = summarize(record);
  const haystack = [
    summary.name,
    entryOf(record),
    summary.detail,
    record.id,
    record.status
  ]
    .join(' ')
    .toLowerCase();
  return words.every(word => haystack.includes(word));
}

/** The jobs list's filter text, shared by the field that edits it and the list it narrows. */
export class JobsFilter {
  get text(): string {
    return this._text;
  }

  set text(text: string) {
    if (text !== this._text) {
      this._text = text;
      this._changed.emit();
    }
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The records the filter lets through, in their order. */
  apply(records: readonly JobRecord[]): JobRecord[] {
    return records.filter(record => matchesFilter(record, this._text));
  }

  private _text = '';
  private readonly _changed = new Signal<this, void>(this);
}
