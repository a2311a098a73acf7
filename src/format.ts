/** How numbers, sizes, rates, times and statuses read in the UI (one place, so they agree). */
import { JobRecord, JobStatus } from './models';

const UNITS = ['B', 'kB', 'MB', 'GB', 'TB'];

/** 1234567 → "1.2 MB" (decimal units, as the server's messages). */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < UNITS.length - 1) {
    value /= 1000;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** Bytes per second → "12.3 MB/s". */
export function formatRate(bytesPerSecond: number): string {
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** Seconds → "0.4 s", "42 s", "3 min 05 s", "2 h 04 min". */
export function formatDuration(seconds: number): string {
  if (seconds < 10) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 60) {
    return `${Math.round(seconds)} s`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    const rest = String(Math.round(seconds % 60)).padStart(2, '0');
    return `${minutes} min ${rest} s`;
  }
  const rest = String(minutes % 60).padStart(2, '0');
  return `${Math.floor(minutes / 60)} h ${rest} min`;
}

/** Unix seconds → the local time of day, with the date when it is not today. */
export function formatTime(unixSeconds: number): string {
  const date = new Date(unixSeconds * 1000);
  const today = new Date().toDateString() === date.toDateString();
  return today
    ? date.toLocaleTimeString()
    : `${date.toLocaleDateString()} ${date.toLocaleTimeString()}`;
}

/** The statuses after which nothing changes any more. */
export const TERMINAL_STATUSES: ReadonlySet<JobStatus> = new Set<JobStatus>([
  'succeeded',
  'failed',
  'cancelled',
  'lost'
]);

export function isTerminal(status: JobStatus | null | undefined): boolean {
  return (
    status !== null && status !== undefined && TERMINAL_STATUSES.has(status)
  );
}

/** Seconds a job ran, or has run so far: from its start (else creation) to its end. */
export function jobSeconds(record: JobRecord): number {
  const start = record.started_at ?? record.created_at;
  const end =
    record.finished_at ??
    (isTerminal(record.status) ? record.updated_at : Date.now() / 1000);
  return Math.max(0, end - start);
}

/** "attempt 2 of 4" once a job runs again after a preemption or a lost node; null before. */
export function attemptWords(
  record: JobRecord | null | undefined
): string | null {
  const attempt = record?.attempt ?? 1;
  if (attempt <= 1) {
    return null;
  }
  const allowed = record?.attempts_allowed;
  return allowed ? `attempt ${attempt} of ${allowed}` : `attempt ${attempt}`;
}

/**
 * The part of a job id that tells jobs apart at a glance: its random tail
 * ("20261201-141622-877dd3" → "877dd3"); an id of another shape is kept whole.
 */
export function shortId(id: string): string {
  const tail = id.split('-').pop() ?? id;
  return tail.length >= 4 && tail.length < id.length ? tail : id;
}
