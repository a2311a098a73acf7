/**
 * The log panel's header: why the job failed (at the top, once it did), the job's status, its
 * stage timeline with j2c's diary folded under it (one line per step, each unfolding to its
 * lines), and its results at the end.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import {
  attemptWords,
  formatBytes,
  formatDuration,
  formatRate,
  jobSeconds
} from '../format';
import { jobsApi } from '../jobs';
import { Artifact, JobRecord, TrackingRun } from '../models';
import { StreamState } from '../stream';
import { CopyAllModel } from './copyall';
import { CopyAll } from './copyallview';
import { JobDiary } from './diary';
import { IFailure } from './failure';
import { IStep, JobProgress, StepName, StepState } from './progress';

const GLYPHS: { [state in StepState]: string } = {
  waiting: '○',
  started: '◐',
  finished: '✓',
  reused: '↺',
  failed: '✕',
  skipped: '–'
};

function stepLabel(name: StepName, trans: TranslationBundle): string {
  const labels: { [step in StepName]: string } = {
    scan: trans.__('Scan'),
    pack: trans.__('Pack'),
    upload: trans.__('Upload'),
    submit: trans.__('Submit'),
    queued: trans.__('Queued'),
    running: trans.__('Running'),
    results: trans.__('Results')
  };
  return labels[name];
}

function stateLabel(state: StepState, trans: TranslationBundle): string {
  const labels: { [key in StepState]: string } = {
    waiting: trans.__('waiting'),
    started: trans.__('in progress'),
    finished: trans.__('done'),
    reused: trans.__('reused'),
    failed: trans.__('failed'),
    skipped: trans.__('skipped')
  };
  return labels[state];
}

/** The short figures next to a step: percent, rate, seconds. */
function figures(step: IStep, trans: TranslationBundle): string {
  const parts: string[] = [];
  if (step.state === 'started' && step.percent !== null) {
    parts.push(`${Math.floor(step.percent)}%`);
  }
  if (
    step.state === 'started' &&
    step.rate !== null &&
    step.name === 'upload'
  ) {
    parts.push(formatRate(step.rate));
  }
  if (step.state === 'reused') {
    parts.push(trans.__('reused'));
  }
  if (step.resumed) {
    parts.push(trans.__('resumed'));
  }
  if (
    (step.state === 'finished' || step.state === 'failed') &&
    step.seconds !== null
  ) {
    parts.push(formatDuration(step.seconds));
  }
  return parts.join(' · ');
}

function Step(props: { step: IStep; trans: TranslationBundle }): JSX.Element {
  const { step, trans } = props;
  const label = stepLabel(step.name, trans);
  const extra = figures(step, trans);
  return (
    <li
      className={`j2c-Step j2c-Step-${step.state}`}
      data-step={step.name}
      data-state={step.state}
      data-resumed={step.resumed ? 'true' : undefined}
      title={step.detail || undefined}
    >
      <span className="j2c-Step-glyph" aria-hidden="true">
        {GLYPHS[step.state]}
      </span>
      <span className="j2c-Step-label">{label}</span>
      <span className="j2c-u-screenReader">{`: ${stateLabel(step.state, trans)}`}</span>
      {extra ? <span className="j2c-Step-figures">{extra}</span> : null}
      {step.state === 'started' && step.percent !== null ? (
        <progress
          className="j2c-Step-bar"
          max={100}
          value={step.percent}
          aria-label={trans.__('%1 progress', label)}
        />
      ) : null}
      {step.state === 'reused' || step.state === 'failed' ? (
        <span className="j2c-Step-detail">{step.detail}</span>
      ) : null}
    </li>
  );
}

/**
 * At the top of a failed job's panel: the reason in one sentence, what to do, and the line it
 * came from. Marked by a cross and a word as well as by colour.
 */
function FailureBanner(props: {
  failure: IFailure;
  trans: TranslationBundle;
}): JSX.Element {
  const { failure, trans } = props;
  return (
    <section
      className="j2c-Failure"
      data-j2c="failure"
      aria-label={trans.__('Why the job failed')}
    >
      <p className="j2c-Failure-reason" data-j2c="failure-reason">
        <span className="j2c-Failure-mark" aria-hidden="true">
          ✕
        </span>
        <strong>{trans.__('Failed:')}</strong> {failure.reason}
      </p>
      {failure.action ? (
        <p className="j2c-Failure-action" data-j2c="failure-action">
          {failure.action}
        </p>
      ) : null}
      {failure.line ? (
        <p className="j2c-Failure-line">
          {trans.__('From:')}{' '}
          <code data-j2c="failure-line">{failure.line}</code>
        </p>
      ) : null}
    </section>
  );
}

/**
 * j2c's diary: one line per step (its state and its last word), each unfolding to every line
 * j2c wrote for it. The steps with nothing to say are left out.
 */
function Diary(props: {
  id: string;
  diary: JobDiary;
  progress: JobProgress;
  trans: TranslationBundle;
}): JSX.Element {
  const { diary, progress, trans } = props;
  const steps = progress.steps.filter(step => diary.entries(step.name).length);
  return (
    <ol
      id={props.id}
      className="j2c-Diary"
      data-j2c="diary"
      aria-label={trans.__("j2c's lines, by step")}
    >
      {steps.map(step => {
        const entries = diary.entries(step.name);
        const open = diary.isOpen(step.name);
        const last = entries[entries.length - 1];
        const linesId = `${props.id}-${step.name}`;
        const dropped = diary.dropped(step.name);
        return (
          <li
            key={step.name}
            className="j2c-Diary-step"
            data-step={step.name}
            data-level={diary.worst(step.name)}
          >
            <button
              type="button"
              className="j2c-Diary-stepButton"
              aria-expanded={open}
              aria-controls={linesId}
              onClick={() => diary.toggleStep(step.name)}
            >
              <span className="j2c-Step-glyph" aria-hidden="true">
                {GLYPHS[step.state]}
              </span>
              <span className="j2c-Diary-stepName">
                {stepLabel(step.name, trans)}
              </span>
              <span className="j2c-u-screenReader">{`: ${stateLabel(step.state, trans)}, `}</span>
              <span className="j2c-Diary-summary">
                {step.detail || last?.text || ''}
              </span>
              <span className="j2c-Diary-count">
                {trans._n('%1 line', '%1 lines', entries.length + dropped)}
              </span>
            </button>
            {open ? (
              <ol id={linesId} className="j2c-Diary-lines">
                {dropped ? (
                  <li className="j2c-Diary-dropped">
                    {trans._n(
                      '%1 earlier line: in the downloaded log',
                      '%1 earlier lines: in the downloaded log',
                      dropped
                    )}
                  </li>
                ) : null}
                {entries.map(entry => (
                  <li key={entry.seq} data-level={entry.level}>
                    {entry.level === 'info' ? null : (
                      <span className="j2c-Diary-level">{`${entry.level}: `}</span>
                    )}
                    {entry.text}
                  </li>
                ))}
              </ol>
            ) : null}
          </li>
        );
      })}
    </ol>
  );
}

/** A web URL (e.g. presigned) opens as is; anything else downloads through the server. */
function ArtifactLink(props: {
  jobId: string;
  artifact: Artifact;
}): JSX.Element {
  const { jobId, artifact } = props;
  const size =
    artifact.size !== null && artifact.size !== undefined
      ? formatBytes(artifact.size)
      : '';
  const web = artifact.url && /^https?:/.test(artifact.url);
  return (
    <li>
      {web ? (
        <a
          href={artifact.url ?? undefined}
          target="_blank"
          rel="noopener noreferrer"
        >
          {artifact.name}
        </a>
      ) : (
        <a
          href={jobsApi.artifactUrl(jobId, artifact.name)}
          download={artifact.name.split('/').pop()}
          data-j2c="artifact"
        >
          {artifact.name}
        </a>
      )}
      {size ? <span className="j2c-Result-size"> {size}</span> : null}
    </li>
  );
}

/** The artifact name of the executed notebook (the results give its location). */
function notebookName(record: JobRecord): string | null {
  const uri = record.results?.executed_notebook;
  if (!uri) {
    return null;
  }
  const listed = record.results?.artifacts?.find(a => a.url === uri);
  return listed?.name ?? uri.split('/').pop() ?? null;
}

/** The job's MLflow run: its link (with its status) and each metric's latest value. */
function TrackingRunRow(props: {
  tracking: TrackingRun;
  trans: TranslationBundle;
}): JSX.Element {
  const { tracking, trans } = props;
  const metrics = Object.entries(tracking.metrics ?? {}).sort(([a], [b]) =>
    a.localeCompare(b)
  );
  return (
    <>
      <dt>{trans.__('MLflow run')}</dt>
      <dd data-j2c="mlflow-run">
        <a href={tracking.url} target="_blank" rel="noopener noreferrer">
          {tracking.run_id}
        </a>
        {tracking.status ? (
          <span className="j2c-Result-size"> {tracking.status}</span>
        ) : null}
        {tracking.error ? (
          <span className="j2c-Result-size" title={tracking.error}>
            {' '}
            {trans.__('(not read)')}
          </span>
        ) : null}
      </dd>
      {metrics.map(([name, value]) => (
        <React.Fragment key={name}>
          <dt className="j2c-Result-metric">{name}</dt>
          <dd data-j2c="mlflow-metric" data-metric={name}>
            {Number.isInteger(value) ? value : value.toPrecision(4)}
          </dd>
        </React.Fragment>
      ))}
    </>
  );
}

function Results(props: {
  record: JobRecord;
  progress: JobProgress;
  trans: TranslationBundle;
  onOpenNotebook: (name: string) => void;
  onShowOutputs: () => void;
  copyAll: CopyAllModel;
}): JSX.Element {
  const { record, progress, trans, onOpenNotebook, onShowOutputs } = props;
  const results = record.results;
  const exitCode = record.exit_code ?? results?.exit_code ?? progress.exitCode;
  const notebook = notebookName(record);
  return (
    <section
      className="j2c-Result"
      aria-label={trans.__('Result')}
      tabIndex={-1}
      data-j2c="results"
    >
      <dl>
        <dt>{trans.__('Exit code')}</dt>
        <dd data-j2c="exit-code">{exitCode ?? '—'}</dd>
        <dt>{trans.__('Duration')}</dt>
        <dd data-j2c="duration">{formatDuration(jobSeconds(record))}</dd>
        {results?.artifacts?.length ? (
          <>
            <dt>{trans.__('Outputs')}</dt>
            <dd>
              <button
                type="button"
                className="jp-mod-styled j2c-ShowOutputs"
                data-j2c="show-outputs"
                title={trans.__(
                  "Copy the outputs into the project's j2c-outputs folder and show them in the file browser (stored at %1)",
                  results.output_uri ?? ''
                )}
                onClick={onShowOutputs}
              >
                {trans.__('Show in file browser')}
              </button>
            </dd>
          </>
        ) : null}
        {results?.outputs_note ? (
          <>
            <dt>{results.output_uri ? '' : trans.__('Outputs')}</dt>
            <dd data-j2c="outputs-note">{results.outputs_note}</dd>
          </>
        ) : null}
        {results?.tracking ? (
          <TrackingRunRow tracking={results.tracking} trans={trans} />
        ) : null}
      </dl>
      {results?.artifacts?.length ? (
        <ul className="j2c-Result-artifacts" aria-label={trans.__('Artifacts')}>
          {results.artifacts.map(artifact => (
            <ArtifactLink
              key={artifact.name}
              jobId={record.id}
              artifact={artifact}
            />
          ))}
        </ul>
      ) : null}
      {notebook ? (
        <button
          type="button"
          className="jp-mod-styled j2c-OpenNotebook"
          onClick={() => onOpenNotebook(notebook)}
        >
          {trans.__('Open executed notebook')}
        </button>
      ) : null}
      {results?.artifacts?.length ? (
        <CopyAll model={props.copyAll} trans={trans} />
      ) : null}
    </section>
  );
}

function connectionText(
  state: StreamState,
  retryInMs: number,
  attempts: number,
  trans: TranslationBundle
): string {
  switch (state) {
    case 'connecting':
      return trans.__('connecting…');
    case 'reconnecting':
      if (retryInMs <= 0) {
        return trans.__('connection lost; reconnecting…');
      }
      return attempts > 1
        ? trans.__(
            'connection lost; reconnecting in %1 s… (%2 attempts failed)',
            Math.ceil(retryInMs / 1000),
            attempts
          )
        : trans.__(
            'connection lost; reconnecting in %1 s…',
            Math.ceil(retryInMs / 1000)
          );
    case 'gone':
      return trans.__('this job no longer exists');
    default:
      return '';
  }
}

export interface IHeaderProps {
  jobId: string;
  record: JobRecord | null;
  progress: JobProgress;
  stream: StreamState;
  /** Milliseconds until the next reconnection attempt, read at render time. */
  retryInMs: number;
  /** Failed reconnection attempts since the connection was lost. */
  attempts: number;
  onRetryNow: () => void;
  trans: TranslationBundle;
  onOpenNotebook: (name: string) => void;
  /** Copy the outputs next to the project and show them in the file browser. */
  onShowOutputs: () => void;
  /** The results' "Copy all" action. */
  copyAll: CopyAllModel;
  /** j2c's own lines, by step. */
  diary: JobDiary;
  /** Why the job failed, once it did. */
  failure: IFailure | null;
}

export function LogHeader(props: IHeaderProps): JSX.Element {
  const { record, progress, trans } = props;
  const status = progress.status ?? record?.status ?? null;
  const connection = connectionText(
    props.stream,
    props.retryInMs,
    props.attempts,
    trans
  );
  return (
    <>
      {props.failure ? (
        <FailureBanner failure={props.failure} trans={trans} />
      ) : null}
      <div className="j2c-LogHeader-top">
        <span className="j2c-LogHeader-name">
          {record?.name ?? props.jobId}
        </span>
        {status ? (
          <span
            className={`j2c-Status j2c-Status-${status}`}
            data-j2c="status"
            role="status"
          >
            {status}
          </span>
        ) : null}
        {attemptWords(record) ? (
          <span className="j2c-LogHeader-attempt" data-j2c="attempt">
            {attemptWords(record)}
          </span>
        ) : null}
        <span className="j2c-LogHeader-message">{progress.message}</span>
        {connection ? (
          <span className="j2c-LogHeader-connection">
            {/* The countdown changes each second: announce the state, not every second. */}
            <span aria-hidden="true">{connection}</span>
            <span className="j2c-u-screenReader" role="status">
              {connectionText(props.stream, 0, 0, trans)}
            </span>
          </span>
        ) : null}
        {props.stream === 'reconnecting' && props.retryInMs > 0 ? (
          <button
            type="button"
            className="jp-mod-styled j2c-LogHeader-retry"
            onClick={props.onRetryNow}
          >
            {trans.__('Retry now')}
          </button>
        ) : null}
      </div>
      <div className="j2c-Timeline-row">
        <ol className="j2c-Timeline" aria-label={trans.__('Stages')}>
          {progress.steps.map(step => (
            <Step key={step.name} step={step} trans={trans} />
          ))}
        </ol>
        {props.diary.count ? (
          <button
            type="button"
            className="j2c-Diary-toggle"
            data-j2c="diary-toggle"
            aria-expanded={props.diary.open}
            aria-controls={`j2c-diary-${props.jobId}`}
            onClick={() => props.diary.toggle()}
          >
            {trans._n('j2c: %1 line', 'j2c: %1 lines', props.diary.count)}
          </button>
        ) : null}
      </div>
      {props.diary.open ? (
        <Diary
          id={`j2c-diary-${props.jobId}`}
          diary={props.diary}
          progress={progress}
          trans={trans}
        />
      ) : null}
      {progress.ended && record ? (
        <Results
          record={record}
          progress={progress}
          trans={trans}
          onOpenNotebook={props.onOpenNotebook}
          onShowOutputs={props.onShowOutputs}
          copyAll={props.copyAll}
        />
      ) : null}
    </>
  );
}
