/**
 * Whose a log line is, read from the event model's line kinds (never guessed from a `j2c:`
 * prefix, which a user's own print may start with): the job's stdout, its stderr, or j2c's
 * own diagnostic line with its level.
 */
import { Event } from '../models';

export type LineOwner = 'stdout' | 'stderr' | 'j2c';

export type LineLevel = 'info' | 'warning' | 'error';

export interface ILineKind {
  owner: LineOwner;
  /** j2c's lines only: how much it matters. */
  level: LineLevel;
}

/** The kind of a `log` event's line. */
export function lineKind(event: Event): ILineKind {
  const wire = event as Event & { source?: string; level?: string | null };
  if (wire.source === 'j2c') {
    const level = wire.level;
    return {
      owner: 'j2c',
      level: level === 'warning' || level === 'error' ? level : 'info'
    };
  }
  return {
    owner: event.stream === 'stderr' ? 'stderr' : 'stdout',
    level: 'info'
  };
}
