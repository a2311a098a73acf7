/** The log panel's header: the job's status, its stage timeline, and its results at the end. */
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
  copyAll: CopyAllModel;
}): JSX.Element {
  const { record, progress, trans, onOpenNotebook } = props;
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
        {results?.output_uri ? (
          <>
            <dt>{trans.__('Outputs')}</dt>
            <dd className="j2c-Result-uri" title={results.output_uri}>
              {results.output_uri}
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
  /** The results' "Copy all" action. */
  copyAll: CopyAllModel;
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
      <ol className="j2c-Timeline" aria-label={trans.__('Stages')}>
        {progress.steps.map(step => (
          <Step key={step.name} step={step} trans={trans} />
        ))}
      </ol>
      {progress.ended && record ? (
        <Results
          record={record}
          progress={progress}
          trans={trans}
          onOpenNotebook={props.onOpenNotebook}
          copyAll={props.copyAll}
        />
      ) : null}
    </>
  );
}
