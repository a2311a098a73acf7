/**
 * What a job record says of sweeps: whether it is a sweep's parent (then the jobs list shows its
 * aggregate and opens the sweep view) or one of its variants (then it is listed in the sweep
 * view, not at the top of the jobs list). One place, so the jobs list reads no sweep field itself.
 */
import { JobRecord } from '../models';

export type SweepRole =
  { role: 'parent'; summary: string } | { role: 'child'; parent: string };

/** The record's part in a sweep (its `sweep` field), or null for a plain job. */
export function sweepOf(record: JobRecord): SweepRole | null {
  const info = record.sweep;
  if (!info) {
    return null;
  }
  if (info.parent) {
    return { role: 'child', parent: info.parent };
  }
  return { role: 'parent', summary: info.summary ?? '' };
}
