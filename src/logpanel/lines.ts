/**
 * Whose a log line is, read from the event model's line kinds (`origin`, `level`, `phase`,
 * set by the server at ingest from a per-job tag; never guessed from a `j2c:` prefix, which a
 * job's own print may start with): the job's stdout, its stderr, or j2c's own line with its
 * level and the step that wrote it. Where the engine merges the job's two streams, its lines
 * carry no stream and read as stdout.
 */
import { Event, LineLevel } from '../models';

export type LineOwner = 'stdout' | 'stderr' | 'j2c';

export type { LineLevel };

export interface ILineKind {
  owner: LineOwner;
  /** j2c's lines only: how much it matters. */
  level: LineLevel;
  /** j2c's lines only: the step that wrote it ('downloading', 'running', ...), or ''. */
  phase: string;
}

/** The kind of a `log` event's line. */
export function lineKind(event: Event): ILineKind {
  if (event.origin === 'j2c') {
    return {
      owner: 'j2c',
      level: event.level ?? 'info',
      phase: event.phase ?? ''
    };
  }
  return {
    owner: event.stream === 'stderr' ? 'stderr' : 'stdout',
    level: 'info',
    phase: ''
  };
}

/** One of j2c's lines as a person reads it: "downloading: 2 layers, 6.3 MB". */
export function j2cText(event: Event, kind: ILineKind): string {
  const text = event.text ?? '';
  return kind.phase ? `${kind.phase}: ${text}` : text;
}
