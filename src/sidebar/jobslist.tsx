/**
 * The jobs list in the sidebar: a filter, then per job its status, name, short id, arguments
 * (a sweep: its values), start, duration, and what can be done; below it, "Show older jobs"
 * while the server has more (the paging state lives in `JobsModel`, the filter's in
 * `JobsFilter`). Above it, while `notifyInBrowser` is on and the browser has not been asked,
 * the button that asks it (browsers grant notifications only from a user action).
 */
import { TranslationBundle } from '@jupyterlab/translation';
import {
  Button,
  LabIcon,
  ReactWidget,
  deleteIcon,
  folderIcon,
  launchIcon,
  refreshIcon,
  stopIcon,
  tableRowsIcon
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { askBrowserPermission, browserPermission } from '../browserNotify';
import {
  attemptWords,
  formatDuration,
  formatTime,
  isTerminal,
  jobSeconds
} from '../format';
import { JobsModel } from '../jobs';
import { JobRecord } from '../models';
import { J2CSettings } from '../settings';
import { sweepOf } from '../sweep/records';
import { JobsFilter, summarize } from './jobrows';

export interface IJobActions {
  open(record: JobRecord): void;
  cancel(record: JobRecord): void;
  /** "Run again…": the form, filled from the job, for the user to change and send. */
  rerun(record: JobRecord): void;
  /** Remove the record, once the user confirmed. */
  remove(record: JobRecord): void;
  /** The job's outputs copied next to its project, shown in the file browser. */
  showOutputs(record: JobRecord): void;
  /** Show a sweep's view (the sidebar provides it). */
  openSweep?(record: JobRecord): void;
}

function Action(props: {
  label: string;
  icon: LabIcon;
  onClick: () => void;
  action: string;
}): JSX.Element {
  return (
    <Button
      minimal
      small
      className="j2c-JobAction"
      data-action={props.action}
      aria-label={props.label}
      title={props.label}
      onClick={props.onClick}
    >
      <props.icon.react tag="span" elementPosition="center" />
    </Button>
  );
}

/** The chosen metric's latest value in the job's MLflow run, if it logged one. */
function Metric(props: {
  record: JobRecord;
  name: string;
}): JSX.Element | null {
  const { record, name } = props;
  const value = name ? record.results?.tracking?.metrics?.[name] : undefined;
  if (value === undefined || value === null) {
    return null;
  }
  return (
    <span className="j2c-Job-metric" data-j2c="list-metric" title={name}>
      {name} {Number.isInteger(value) ? value : value.toPrecision(4)}
    </span>
  );
}

function JobRow(props: {
  record: JobRecord;
  actions: IJobActions;
  trans: TranslationBundle;
  metric: string;
}): JSX.Element {
  const { record, actions, trans, metric } = props;
  const ended = isTerminal(record.status);
  const sweep = sweepOf(record);
  const summary = summarize(record);
  const openSweep =
    sweep?.role === 'parent' && actions.openSweep
      ? () => actions.openSweep?.(record)
      : null;
  const hasOutputs = ended && (record.results?.artifacts ?? []).length > 0;
  const label = summary.detail
    ? `${summary.name} ${summary.detail}`
    : summary.name;
  return (
    <li className="j2c-Job" data-job-id={record.id} data-status={record.status}>
      <button
        type="button"
        className="j2c-Job-name"
        title={
          openSweep
            ? trans.__('Open the sweep view of %1 (%2)', label, record.id)
            : trans.__('Open the log of %1 (%2)', label, record.id)
        }
        onClick={() => (openSweep ? openSweep() : actions.open(record))}
      >
        {summary.name}
      </button>
      {summary.entry || summary.detail ? (
        <span
          className="j2c-Job-args"
          data-j2c="job-args"
          title={[summary.entry, summary.detail].filter(Boolean).join(' ')}
        >
          {summary.entry ? (
            <span className="j2c-Job-entry">{summary.entry}</span>
          ) : null}
          {summary.detail}
        </span>
      ) : null}
      <span className="j2c-Job-meta">
        <span className={`j2c-Status j2c-Status-${record.status}`}>
          {record.status}
        </span>
        <span className="j2c-Job-time">
          {formatTime(record.started_at ?? record.created_at)}
          <span
            className="j2c-Job-id"
            data-j2c="short-id"
            title={trans.__('Job %1', record.id)}
          >
            {summary.short}
          </span>
        </span>
        <span className="j2c-Job-duration">
          {formatDuration(jobSeconds(record))}
        </span>
      </span>
      <Metric record={record} name={metric} />
      {attemptWords(record) ? (
        <span className="j2c-Job-attempt" data-j2c="attempt">
          {attemptWords(record)}
        </span>
      ) : null}
      {sweep?.role === 'parent' ? (
        <span className="j2c-Job-sweep" data-j2c="sweep-aggregate">
          {sweep.summary}
        </span>
      ) : null}
      <span className="j2c-Job-actions">
        {openSweep ? (
          <Action
            action="sweep"
            label={trans.__('Open sweep view')}
            icon={tableRowsIcon}
            onClick={openSweep}
          />
        ) : null}
        <Action
          action="open"
          label={trans.__('Open log')}
          icon={launchIcon}
          onClick={() => actions.open(record)}
        />
        {hasOutputs ? (
          <Action
            action="outputs"
            label={trans.__('Show outputs in the file browser')}
            icon={folderIcon}
            onClick={() => actions.showOutputs(record)}
          />
        ) : null}
        {ended ? (
          <>
            <Action
              action="rerun"
              label={trans.__('Run again…')}
              icon={refreshIcon}
              onClick={() => actions.rerun(record)}
            />
            <Action
              action="remove"
              label={trans.__('Remove record…')}
              icon={deleteIcon}
              onClick={() => actions.remove(record)}
            />
          </>
        ) : (
          <Action
            action="cancel"
            label={trans.__('Cancel job')}
            icon={stopIcon}
            onClick={() => actions.cancel(record)}
          />
        )}
      </span>
    </li>
  );
}

/** The filter above the list: words that each shown job's row must hold. */
function FilterField(props: {
  filter: JobsFilter;
  trans: TranslationBundle;
}): JSX.Element {
  const { filter, trans } = props;
  return (
    <div className="j2c-Jobs-filter">
      <input
        type="search"
        className="jp-mod-styled j2c-Input"
        data-j2c="jobs-filter"
        value={filter.text}
        placeholder={trans.__('Filter: name, arguments, id, status')}
        aria-label={trans.__('Filter jobs')}
        spellCheck={false}
        onChange={event => {
          filter.text = event.target.value;
        }}
      />
    </div>
  );
}

/** The list, re-rendered whenever the jobs model changes. */
export class JobsListWidget extends ReactWidget {
  constructor(
    private readonly _model: JobsModel,
    private readonly _actions: IJobActions,
    private readonly _trans: TranslationBundle,
    private readonly _settings?: J2CSettings,
    private readonly _filter: JobsFilter = new JobsFilter()
  ) {
    super();
    this.addClass('j2c-JobsSection');
    this.title.label = _trans.__('Jobs');
    _model.changed.connect(() => this.update(), this);
    _settings?.changed.connect(() => this.update(), this);
    _filter.changed.connect(() => this.update(), this);
  }

  render(): JSX.Element {
    const trans = this._trans;
    const jobs = this._model.jobs;
    const listed = this._filter.apply(
      jobs.filter(record => sweepOf(record)?.role !== 'child')
    );
    return (
      <div className="j2c-Jobs">
        {jobs.length ? (
          <FilterField filter={this._filter} trans={trans} />
        ) : null}
        {this._settings?.current.notifyInBrowser ? (
          <BrowserPermission trans={trans} onAnswer={() => this.update()} />
        ) : null}
        {this._model.error ? (
          <div className="j2c-Jobs-error" role="status">
            {trans.__('Cannot load the jobs: %1', this._model.error)}
          </div>
        ) : null}
        {listed.length ? (
          <ul aria-label={trans.__('Jobs')}>
            {listed.map(record => (
              <JobRow
                key={record.id}
                record={record}
                actions={this._actions}
                trans={trans}
                metric={this._settings?.current.listMetric ?? ''}
              />
            ))}
          </ul>
        ) : jobs.length ? (
          <div className="j2c-Jobs-empty" role="status">
            {trans.__('No job matches "%1".', this._filter.text)}
          </div>
        ) : (
          <div className="j2c-Jobs-empty">
            {this._model.loaded
              ? trans.__('No jobs yet.')
              : trans.__('Loading…')}
          </div>
        )}
        <OlderJobs model={this._model} trans={trans} />
      </div>
    );
  }
}

/** Ask for the browser's permission to notify (once: the browser keeps the answer). */
function BrowserPermission(props: {
  trans: TranslationBundle;
  onAnswer: () => void;
}): JSX.Element | null {
  const { trans, onAnswer } = props;
  const permission = browserPermission();
  if (permission === 'default') {
    return (
      <div className="j2c-Jobs-permission">
        <Button
          small
          className="j2c-Jobs-allowNotifications"
          onClick={() => void askBrowserPermission().then(onAnswer, onAnswer)}
        >
          {trans.__('Allow browser notifications')}
        </Button>
      </div>
    );
  }
  if (permission === 'denied' || permission === 'unsupported') {
    return (
      <div className="j2c-Jobs-permission" data-j2c="notify-refused">
        {permission === 'denied'
          ? trans.__(
              'The browser blocks notifications from this site: allow them in its site settings.'
            )
          : trans.__('This browser cannot show notifications.')}
      </div>
    );
  }
  return null;
}

/** Below the list: how many jobs are loaded, and the button that loads the next page. */
function OlderJobs(props: {
  model: JobsModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, trans } = props;
  if (!model.hasOlder && !model.olderError) {
    return null;
  }
  const count = model.jobs.length;
  return (
    <div className="j2c-Jobs-more">
      <span className="j2c-Jobs-count" data-j2c="jobs-count">
        {trans._n('%1 job loaded', '%1 jobs loaded', count)}
      </span>
      {model.hasOlder ? (
        <Button
          small
          className="j2c-Jobs-older"
          disabled={model.loadingOlder}
          onClick={() => void model.loadOlder()}
        >
          {model.loadingOlder
            ? trans.__('Loading older jobs…')
            : trans.__('Show older jobs')}
        </Button>
      ) : null}
      {model.olderError ? (
        <div className="j2c-Jobs-error" role="status">
          {trans.__('Cannot load older jobs: %1', model.olderError)}
        </div>
      ) : null}
    </div>
  );
}
