/**
 * `LogAnnouncer`: the log panel's polite live region (`role="log"`, WCAG 4.1.3, ARIA23). It
 * says the job's status changes, a failure's reason once, the job's end once, and the job's own
 * lines capped at `maxLines` lines per `windowMs`, then "N more lines", so a flood of output
 * never floods a screen reader. j2c's own lines are said only when the job fails (the panel
 * decides). Visually hidden; the output and the header show the same.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

/** Output lines said per window, and the window. */
export const ANNOUNCED_LINES = 10;
export const ANNOUNCE_WINDOW_MS = 5000;

/** Announcements kept in the region (older ones are dropped: they were read already). */
const KEPT = 50;

/** Escape sequences (colours, cursor moves, titles, resets): built from ESC and BEL. */
const ESC = String.fromCharCode(27);
const BEL = String.fromCharCode(7);
const ANSI = new RegExp(
  `${ESC}\\[[0-9;?]*[A-Za-z]|${ESC}\\][^${BEL}]*${BEL}|${ESC}[()][A-Za-z0-9]|${ESC}c`,
  'g'
);

/** What a line reads as: no escape codes, the last state of a `\r` progress bar. */
export function spokenText(line: string): string {
  const plain = line.replace(ANSI, '');
  const parts = plain.split('\r').filter(part => part.trim());
  return (parts[parts.length - 1] ?? '').trim();
}

export class LogAnnouncer extends Widget {
  constructor(options: LogAnnouncer.IOptions) {
    super();
    this._trans = options.trans;
    this._maxLines = options.maxLines ?? ANNOUNCED_LINES;
    this._windowMs = options.windowMs ?? ANNOUNCE_WINDOW_MS;
    this.addClass('j2c-LogAnnouncer');
    this.addClass('j2c-u-screenReader');
    this.node.setAttribute('role', 'log');
    this.node.setAttribute('aria-live', 'polite');
    this.node.setAttribute('aria-relevant', 'additions');
    this.node.setAttribute('aria-label', this._trans.__('Job announcements'));
  }

  /** A status change: "queued: Resources", "running". */
  status(status: string, text: string): void {
    const said = text ? `${status}: ${text}` : status;
    if (said !== this._lastStatus) {
      this._lastStatus = said;
      this._say(this._trans.__('Status %1', said), 'status');
    }
  }

  /** Why the job failed, what to do and the line it came from, said once. */
  failure(reason: string, action: string, line: string): void {
    if (this._failed) {
      return;
    }
    this._failed = true;
    const parts = [this._trans.__('Failed: %1', reason)];
    if (action) {
      parts.push(action);
    }
    if (line) {
      parts.push(this._trans.__('From: %1', spokenText(line)));
    }
    this._say(parts.join(' '), 'failure');
  }

  /** How the job ended (status, exit code, duration), said once. */
  ended(summary: string): void {
    if (!this._ended) {
      this._ended = true;
      this._flushSkipped();
      this._say(summary, 'end');
    }
  }

  /** A line of output: said while the window has room, else counted for "N more lines". */
  line(text: string): void {
    const spoken = spokenText(text);
    if (!spoken) {
      return;
    }
    const now = Date.now();
    if (now - this._windowStart >= this._windowMs) {
      this._flushSkipped();
      this._windowStart = now;
      this._inWindow = 0;
    }
    if (this._inWindow < this._maxLines) {
      this._inWindow += 1;
      this._say(spoken, 'line');
      return;
    }
    this._skipped += 1;
    if (!this._timer) {
      const left = this._windowStart + this._windowMs - now;
      this._timer = window.setTimeout(() => {
        this._timer = 0;
        this._flushSkipped();
        this._windowStart = Date.now();
        this._inWindow = 0;
      }, left);
    }
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  private _flushSkipped(): void {
    window.clearTimeout(this._timer);
    this._timer = 0;
    if (this._skipped) {
      const count = this._skipped;
      this._skipped = 0;
      this._say(this._trans._n('%1 more line', '%1 more lines', count), 'more');
    }
  }

  private _say(text: string, kind: string): void {
    const entry = document.createElement('div');
    entry.textContent = text;
    entry.dataset.kind = kind;
    this.node.appendChild(entry);
    while (this.node.childElementCount > KEPT) {
      this.node.firstElementChild?.remove();
    }
  }

  private readonly _trans: TranslationBundle;
  private readonly _maxLines: number;
  private readonly _windowMs: number;
  private _lastStatus = '';
  private _ended = false;
  private _failed = false;
  private _windowStart = 0;
  private _inWindow = 0;
  private _skipped = 0;
  private _timer = 0;
}

export namespace LogAnnouncer {
  export interface IOptions {
    trans: TranslationBundle;
    maxLines?: number;
    windowMs?: number;
  }
}
