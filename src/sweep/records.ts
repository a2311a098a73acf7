/**
 * What a job record says of sweeps: whether it is a sweep's parent (then the jobs list shows its
 * aggregate and opens the sweep view) or one of its variants (then it is listed in the sweep
 * view, not at the top of the jobs list). One place, so the jobs list reads no sweep field itself.
 */
import { JobRecord } from '../models';

export type SweepRole =
  { role: 'parent'; summary: string } | { role: 'child'; parent: string };

/**
 * The record's part in a sweep, or null. The record does not carry its sweep yet (the sweep's
 * parent and children come with #30 sections 1-2): every job reads as no sweep's until then.
 */
export function sweepOf(record: JobRecord): SweepRole | null {
  void record;
  return null;
}
