/**
 * `LogPanel`: one job's log panel — its header (why it failed, status, stage timeline with
 * j2c's diary folded under each step, results) above the job's own output — fed by a
 * `JobEventStream` that resumes after the last event it showed. The output holds the job's
 * lines only (its stderr marked), plus j2c's errors; j2c's other lines go to the diary.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';
import * as React from 'react';

import { formatDuration, isTerminal, jobSeconds, shortId } from '../format';
import { JobsModel, jobsApi } from '../jobs';
import { Event, JobRecord } from '../models';
import { summarize } from '../sidebar/jobrows';
import { JobEventStream } from '../stream';
import { LogAnnouncer } from './announcer';
import { CopyAllModel } from './copyall';
import { JobDiary } from './diary';
import { IFailure, failureOf } from './failure';
import { ILineKind, j2cText, lineKind } from './lines';
import { JobProgress } from './progress';
import { LogView, STDERR_MARK } from './terminal';
import { LogHeader } from './timeline';

/** Events fetched per request when downloading the whole log. */
const DOWNLOAD_PAGE = 5000;

const DIM = (text: string): string => `\x1b[2m${text}\x1b[22m`;
const RED = (text: string): string => `\x1b[31m${text}\x1b[39m`;

/**
 * A stderr line as the view shows it: a red bar before it (a shape, not only a colour) and its
 * text red, also after each `\r` of a progress bar (which returns to the line's start).
 */
function stderrLine(text: string): string {
  const mark = RED(`${STDERR_MARK} `);
  return `${mark}${RED(text.replace(/\r/g, `\r${mark}`))}`;
}

/** One of j2c's own errors, in the output where it happened: marked ✕ and named. */
const J2C_ERROR = (text: string): string =>
  `\x1b[1;31m✕ j2c: ${text}\x1b[22;39m`;

/** One line as the view shows it, with the rank that wrote it (null: j2c's own, or one node). */
interface IShownLine {
  text: string;
  rank: number | null;
}

/** The rank of a multi-node job's log event (`data.rank`), else null. */
export function eventRank(event: Event): number | null {
  const rank = (event.data as { rank?: unknown } | undefined)?.rank;
  return typeof rank === 'number' ? rank : null;
}

/** One event as a line of the downloaded log; null for what is no line (progress ticks). */
function downloadedLine(event: Event): string | null {
  switch (event.kind) {
    case 'log': {
      const text = event.text ?? '';
      const kind = lineKind(event);
      if (kind.owner === 'j2c') {
        const level = kind.level === 'info' ? '' : `${kind.level}: `;
        return `[j2c] ${level}${j2cText(event, kind)}`;
      }
      const rank = eventRank(event);
      return rank === null ? text : `[${rank}] ${text}`;
    }
    case 'stage':
      return `[j2c] ${event.stage} ${event.state}${event.text ? `: ${event.text}` : ''}`;
    case 'status':
      return `[j2c] ${event.status}${event.text ? `: ${event.text}` : ''}`;
    case 'error':
      return `[j2c] error: ${event.text ?? ''}`;
    case 'result':
      return `[j2c] result: ${event.text ?? ''}`;
    default:
      return null;
  }
}

class HeaderWidget extends ReactWidget {
  constructor(private readonly _panel: LogPanel) {
    super();
    this.addClass('j2c-LogHeader');
  }

  render(): JSX.Element {
    const panel = this._panel;
    return (
      <LogHeader
        jobId={panel.jobId}
        record={panel.record}
        progress={panel.progress}
        stream={panel.stream.state}
        retryInMs={panel.stream.retryInMs}
        attempts={panel.stream.attempts}
        onRetryNow={() => panel.stream.reconnect()}
        trans={panel.trans}
        onOpenNotebook={name => void panel.openNotebook(name)}
        onShowOutputs={() => void panel.showOutputs()}
        copyAll={panel.copyAll}
        diary={panel.diary}
        failure={panel.failure}
      />
    );
  }
}

export class LogPanel extends Panel {
  constructor(options: LogPanel.IOptions) {
    super();
    this.jobId = options.jobId;
    this.trans = options.trans;
    this._jobs = options.jobs;
    this._openNotebook = options.openNotebook;
    this._showOutputs = options.showOutputs;
    this.id = `j2c-logpanel-${options.jobId}`;
    this.addClass('j2c-LogPanel');
    this.title.label = options.jobId;
    this.title.closable = true;
    this._header = new HeaderWidget(this);
    this.copyAll = new CopyAllModel({ jobId: options.jobId });
    this.copyAll.changed.connect(() => this._header.update());
    this.diary.changed.connect(() => this._header.update());
    this.view = new LogView({
      scrollback: options.scrollback,
      follow: options.follow,
      screenReader: options.screenReader,
      label: this.trans.__('Output of job %1', options.jobId)
    });
    this.announcer = new LogAnnouncer({ trans: this.trans });
    this._keep = options.scrollback;
    this._empty.addClass('j2c-LogEmpty');
    this._empty.node.textContent = this.trans.__(
      "No output yet: the job's own lines show here."
    );
    this.addWidget(this._header);
    this.addWidget(this.announcer);
    this.addWidget(this._empty);
    this.addWidget(this.view);
    this.stream = new JobEventStream({
      jobId: options.jobId,
      onEvent: event => this.ingest(event)
    });
    this.stream.stateChanged.connect(() => this._header.update());
    this.stream.retryChanged.connect(() => this._tick());
    void this._loadRecord();
    this.stream.start();
  }

  readonly jobId: string;
  readonly trans: TranslationBundle;
  readonly view: LogView;
  /** The polite live region: status changes, errors, the end, and new output (capped). */
  readonly announcer: LogAnnouncer;
  readonly stream: JobEventStream;
  readonly progress = new JobProgress();
  /** j2c's own lines and events, one group per timeline step. */
  readonly diary = new JobDiary();
  /** The results' "Copy all" action: its state, which the header renders. */
  readonly copyAll: CopyAllModel;

  get record(): JobRecord | null {
    return this._record;
  }

  /** The job reached a terminal status (its record is then up to date). */
  get ended(): ISignal<this, JobRecord | null> {
    return this._ended;
  }

  /** Why the job failed (its reason, what to do, the line), once it did; else null. */
  get failure(): IFailure | null {
    return failureOf(
      this._record,
      this.progress,
      this._lastError || this._lastLine,
      this.trans
    );
  }

  /**
   * Show one event. The job's own lines go to the output (stderr marked) and to the live
   * region; j2c's lines and events go to the diary under the timeline step they belong to (its
   * errors also to the output, where they happened); the rest is the header's.
   */
  ingest(event: Event): void {
    if (event.kind === 'log') {
      const kind = lineKind(event);
      if (kind.owner === 'j2c') {
        this._j2cLine(event, kind);
        return;
      }
      const rank = eventRank(event);
      if (rank !== null && !this._ranks.includes(rank)) {
        this._ranks = [...this._ranks, rank].sort((a, b) => a - b);
        this._ranksChanged.emit(this._ranks);
      }
      const text = event.text ?? '';
      const ranked = rank === null ? text : `${DIM(`[${rank}]`)} ${text}`;
      if (kind.owner === 'stderr') {
        this._show(stderrLine(ranked), rank);
        if (text.trim()) {
          this._lastError = text.trim();
        }
      } else {
        this._show(ranked, rank);
        if (!event.stream && text.trim()) {
          this._lastLine = text.trim(); // streams merged: an error may be any line
        }
      }
      this._outputShown();
      if (this._visible(rank)) {
        this.announcer.line(rank === null ? text : `[${rank}] ${text}`);
      }
      return;
    }
    this.progress.apply(event);
    this.diary.apply(event);
    if (event.kind === 'status') {
      if (!isTerminal(event.status)) {
        this.announcer.status(event.status ?? '', event.text ?? '');
      }
      this._setTitle();
      if (isTerminal(event.status)) {
        void this._finish();
      }
    } else if (
      event.kind === 'error' ||
      (event.kind === 'stage' && event.state === 'failed')
    ) {
      this._show(J2C_ERROR(event.text ?? ''));
    }
    this._header.update();
  }

  /** The ranks of a multi-node job seen in its log so far, in order (empty: one node). */
  get ranks(): readonly number[] {
    return this._ranks;
  }

  get ranksChanged(): ISignal<this, readonly number[]> {
    return this._ranksChanged;
  }

  /** The rank whose lines the view shows (with j2c's own), or null for every rank. */
  get rankFilter(): number | null {
    return this._rankFilter;
  }

  /** Show one rank's lines only (null: all); the lines the view keeps are written again. */
  setRankFilter(rank: number | null): void {
    if (rank === this._rankFilter) {
      return;
    }
    this._rankFilter = rank;
    this.view.clear();
    for (const line of this._recent) {
      if (this._visible(line.rank)) {
        this.view.appendLine(line.text);
      }
    }
  }

  /**
   * Bring the results (exit code, outputs, artifacts) into view and move the focus there,
   * once the job ended and they are shown (a restored panel replays its events first).
   */
  showResults(timeoutMs = 10000): void {
    const started = Date.now();
    const look = (): void => {
      const results = this.node.querySelector<HTMLElement>('.j2c-Result');
      if (results) {
        results.scrollIntoView({ block: 'nearest' });
        results.focus();
      } else if (!this.isDisposed && Date.now() - started < timeoutMs) {
        window.setTimeout(look, 100);
      }
    };
    look();
  }

  async cancel(): Promise<void> {
    await this._jobs.cancel(this.jobId);
  }

  /**
   * The whole log as a text file (every line, not only those the view keeps): the job's lines
   * as it wrote them, and j2c's diary among them, each of j2c's lines marked `[j2c]`.
   */
  async download(): Promise<void> {
    const lines: string[] = [];
    let after = 0;
    for (;;) {
      const events = await jobsApi.events(this.jobId, after, DOWNLOAD_PAGE);
      for (const event of events) {
        const line = downloadedLine(event);
        if (line !== null) {
          lines.push(line);
        }
      }
      if (events.length < DOWNLOAD_PAGE) {
        break;
      }
      after = events[events.length - 1].seq;
    }
    const blob = new Blob([lines.join('\n') + '\n'], { type: 'text/plain' });
    const url = URL.createObjectURL(blob);
    const link = document.createElement('a');
    link.href = url;
    link.download = `${this._record?.name ?? 'job'}-${this.jobId}.log`;
    document.body.appendChild(link);
    link.click();
    link.remove();
    URL.revokeObjectURL(url);
  }

  /** The job's outputs, copied next to its project, shown in the file browser. */
  showOutputs(): Promise<void> {
    return this._showOutputs(this.jobId);
  }

  /** Copy the executed notebook (artifact `name`) into the project and open it. */
  openNotebook(name: string): Promise<void> {
    return this._openNotebook(this.jobId, name);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearTimeout(this._tickTimer);
    this.stream.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  /**
   * Redraw the header now and, while a retry is waiting, again each time its countdown
   * passes a whole second, so "reconnecting in N s" tells the truth until the attempt.
   */
  private _tick(): void {
    window.clearTimeout(this._tickTimer);
    this._tickTimer = 0;
    this._header.update();
    const left = this.stream.retryInMs;
    if (this.stream.state === 'reconnecting' && left > 0) {
      const toNextSecond = left % 1000 || 1000;
      this._tickTimer = window.setTimeout(() => this._tick(), toNextSecond + 5);
    }
  }

  private async _loadRecord(): Promise<void> {
    try {
      this._record = await jobsApi.get(this.jobId);
    } catch {
      return; // the stream says when the job is gone
    }
    this._setTitle();
    this._header.update();
  }

  private async _finish(): Promise<void> {
    await this._loadRecord();
    void this._jobs.refresh();
    const failure = this.failure;
    if (failure) {
      // Now j2c's own words matter: where it went wrong, and its warnings and errors there.
      if (failure.step) {
        this.diary.reveal(failure.step);
      }
      this.announcer.failure(failure.reason, failure.action, failure.line);
      for (const line of this._j2cTroubles) {
        this.announcer.line(line);
      }
    }
    if (this.view.lineCount === 0) {
      this._empty.node.textContent = this.trans.__('The job wrote no output.');
    }
    this.announcer.ended(this._endSummary());
    this._ended.emit(this._record);
    this._header.update();
  }

  /** One of j2c's lines: into the diary; an error also into the output. */
  private _j2cLine(event: Event, kind: ILineKind): void {
    this.diary.line(event, kind);
    const text = j2cText(event, kind);
    if (kind.level !== 'info' && text.trim()) {
      this._j2cTroubles.push(`j2c: ${text}`);
    }
    if (kind.level === 'error') {
      this._show(J2C_ERROR(text));
      this._lastError = text.trim() || this._lastError;
    }
    this._header.update();
  }

  /** The first line of output hides "no output yet". */
  private _outputShown(): void {
    if (!this._hasOutput) {
      this._hasOutput = true;
      this._empty.hide();
    }
  }

  /** "Job train.py succeeded, exit code 0, after 42 s": what the live region says at the end. */
  private _endSummary(): string {
    const record = this._record;
    const status = this.progress.status ?? record?.status ?? '';
    const parts = [
      this.trans.__('Job %1 %2', record?.name ?? this.jobId, status)
    ];
    const exitCode = record?.exit_code ?? this.progress.exitCode;
    if (exitCode !== null && exitCode !== undefined) {
      parts.push(this.trans.__('exit code %1', exitCode));
    }
    if (record) {
      parts.push(this.trans.__('after %1', formatDuration(jobSeconds(record))));
    }
    if (this.progress.message && status !== 'succeeded') {
      parts.push(this.progress.message);
    }
    return parts.join(', ');
  }

  /** Write a line if the rank filter lets it through; keep it for when the filter changes. */
  private _show(text: string, rank: number | null = null): void {
    this._recent.push({ text, rank });
    // As many as the view keeps; dropped in batches so each line costs O(1) on average.
    if (this._recent.length > this._keep * 2) {
      this._recent = this._recent.slice(-this._keep);
    }
    if (this._visible(rank)) {
      this.view.appendLine(text);
    }
  }

  private _visible(rank: number | null): boolean {
    return (
      rank === null || this._rankFilter === null || rank === this._rankFilter
    );
  }

  private _setTitle(): void {
    const name = this._record?.name ?? this.jobId;
    const status = this.progress.status ?? this._record?.status ?? '';
    // The short id tells runs of the same script apart; the caption adds the arguments.
    this.title.label = this._record ? `${name} ${shortId(this.jobId)}` : name;
    const detail = this._record ? summarize(this._record).detail : '';
    this.title.caption = this.trans.__(
      '%1 (%2): %3',
      detail ? `${name} ${detail}` : name,
      this.jobId,
      status
    );
    this.title.className = status ? `j2c-mod-${status}` : '';
  }

  private readonly _jobs: JobsModel;
  private readonly _header: HeaderWidget;
  private readonly _openNotebook: LogPanel.IOptions['openNotebook'];
  private _record: JobRecord | null = null;
  private _tickTimer = 0;
  private readonly _showOutputs: LogPanel.IOptions['showOutputs'];
  /** The job's last error line (stderr, or j2c's error): where a failure came from. */
  private _lastError = '';
  /** The job's last line where the engine does not tell stderr from stdout. */
  private _lastLine = '';
  /** j2c's warnings and errors: announced only if the job fails. */
  private _j2cTroubles: string[] = [];
  private _hasOutput = false;
  private readonly _empty = new Widget();
  private readonly _ended = new Signal<this, JobRecord | null>(this);
  private _ranks: readonly number[] = [];
  private _rankFilter: number | null = null;
  private _recent: IShownLine[] = [];
  private readonly _keep: number;
  private readonly _ranksChanged = new Signal<this, readonly number[]>(this);
}

export namespace LogPanel {
  export interface IOptions {
    jobId: string;
    jobs: JobsModel;
    trans: TranslationBundle;
    scrollback: number;
    follow: boolean;
    /** xterm's screen-reader mode for the output. */
    screenReader?: boolean;
    /** Copy a job's artifact into its project and open it (the executed notebook). */
    openNotebook: (jobId: string, name: string) => Promise<void>;
    /** Copy a job's outputs into its project and show them in the file browser. */
    showOutputs: (jobId: string) => Promise<void>;
  }
}
