/**
 * `LogPanel`: one job's log panel — its header (status, stage timeline, results) above its
 * output — fed by a `JobEventStream` that resumes after the last event it showed.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel } from '@lumino/widgets';
import * as React from 'react';

import { isTerminal } from '../format';
import { JobsModel, jobsApi } from '../jobs';
import { Event, JobRecord } from '../models';
import { JobEventStream } from '../stream';
import { JobProgress } from './progress';
import { LogView } from './terminal';
import { LogHeader } from './timeline';

/** Events fetched per request when downloading the whole log. */
const DOWNLOAD_PAGE = 5000;

const DIM = (text: string): string => `\x1b[2m${text}\x1b[22m`;
const RED = (text: string): string => `\x1b[31m${text}\x1b[39m`;

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
        trans={panel.trans}
        onOpenNotebook={name => void panel.openNotebook(name)}
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
    this.id = `j2c-logpanel-${options.jobId}`;
    this.addClass('j2c-LogPanel');
    this.title.label = options.jobId;
    this.title.closable = true;
    this._header = new HeaderWidget(this);
    this.view = new LogView({
      scrollback: options.scrollback,
      follow: options.follow
    });
    this.addWidget(this._header);
    this.addWidget(this.view);
    this.stream = new JobEventStream({
      jobId: options.jobId,
      onEvent: event => this.ingest(event)
    });
    this.stream.stateChanged.connect(() => this._header.update());
    void this._loadRecord();
    this.stream.start();
  }

  readonly jobId: string;
  readonly trans: TranslationBundle;
  readonly view: LogView;
  readonly stream: JobEventStream;
  readonly progress = new JobProgress();

  get record(): JobRecord | null {
    return this._record;
  }

  /** The job reached a terminal status (its record is then up to date). */
  get ended(): ISignal<this, JobRecord | null> {
    return this._ended;
  }

  /** Show one event: a log line in the view, anything else in the header. */
  ingest(event: Event): void {
    if (event.kind === 'log') {
      this.view.appendLine(event.text ?? '');
      return;
    }
    this.progress.apply(event);
    if (event.kind === 'status') {
      const text = event.text ? `: ${event.text}` : '';
      this.view.appendLine(DIM(`[j2c] ${event.status ?? ''}${text}`));
      this._setTitle();
      if (isTerminal(event.status)) {
        void this._finish();
      }
    } else if (
      event.kind === 'error' ||
      (event.kind === 'stage' && event.state === 'failed')
    ) {
      this.view.appendLine(RED(`[j2c] ${event.text ?? ''}`));
    }
    this._header.update();
  }

  async cancel(): Promise<void> {
    await this._jobs.cancel(this.jobId);
  }

  /** Every log line of the job (not only those the view keeps), as a text file. */
  async download(): Promise<void> {
    const lines: string[] = [];
    let after = 0;
    for (;;) {
      const events = await jobsApi.events(this.jobId, after, DOWNLOAD_PAGE);
      for (const event of events) {
        if (event.kind === 'log') {
          lines.push(event.text ?? '');
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

  /** Copy the executed notebook (artifact `name`) into the project and open it. */
  openNotebook(name: string): Promise<void> {
    return this._openNotebook(this.jobId, name);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.stream.dispose();
    Signal.clearData(this);
    super.dispose();
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
    this._ended.emit(this._record);
  }

  private _setTitle(): void {
    const name = this._record?.name ?? this.jobId;
    const status = this.progress.status ?? this._record?.status ?? '';
    this.title.label = this.trans.__('%1 log', name);
    this.title.caption = this.trans.__('%1 (%2): %3', name, this.jobId, status);
    this.title.className = status ? `j2c-mod-${status}` : '';
  }

  private readonly _jobs: JobsModel;
  private readonly _header: HeaderWidget;
  private readonly _openNotebook: LogPanel.IOptions['openNotebook'];
  private _record: JobRecord | null = null;
  private readonly _ended = new Signal<this, JobRecord | null>(this);
}

export namespace LogPanel {
  export interface IOptions {
    jobId: string;
    jobs: JobsModel;
    trans: TranslationBundle;
    scrollback: number;
    follow: boolean;
    /** Copy a job's artifact into its project and open it (the executed notebook). */
    openNotebook: (jobId: string, name: string) => Promise<void>;
  }
}
