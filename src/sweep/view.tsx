/**
 * The sweep view in the Compute panel: the sweep's aggregate, a real <table> with one row per
 * variant (its values, status, duration, exit code and the chosen metric), sortable from its
 * column headers, and the plot below. A row (or a point of the plot) opens that variant's log.
 * State lives in `SweepModel`; this only renders it.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Button, ReactWidget, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { formatDuration, jobSeconds } from '../format';
import { SweepVariant } from '../models';
import { SweepModel } from './model';
import { SweepPlot } from './plot';
import {
  PlotAxis,
  SweepColumn,
  columnKey,
  formatMetric,
  sameColumn
} from './rows';

export interface ISweepActions {
  /** Open the log panel of one variant's job. */
  openVariant(jobId: string): void;
  close(): void;
}

let nextId = 0;

export class SweepViewWidget extends ReactWidget {
  constructor(
    readonly model: SweepModel,
    private readonly _actions: ISweepActions,
    private readonly _trans: TranslationBundle
  ) {
    super();
    this.addClass('j2c-SweepSection');
    this.title.label = _trans.__('Sweep');
    this._idPrefix = `j2c-sweep-${++nextId}`;
    model.changed.connect(() => this.update(), this);
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.model.dispose();
    }
    super.dispose();
  }

  render(): JSX.Element {
    const trans = this._trans;
    const model = this.model;
    const view = model.view;
    if (view) {
      this.title.label = trans.__('Sweep: %1', view.parent.name);
    }
    return (
      <div
        className="j2c-Sweep"
        data-j2c="sweep-view"
        data-sweep-id={model.parentId}
      >
        <div className="j2c-Sweep-header">
          <span
            className="j2c-Sweep-summary"
            data-j2c="sweep-summary"
            role="status"
          >
            {view ? view.summary : trans.__('Loading the sweep…')}
          </span>
          <Button
            minimal
            small
            className="j2c-Sweep-close"
            aria-label={trans.__('Close the sweep view')}
            title={trans.__('Close the sweep view')}
            onClick={() => this._actions.close()}
          >
            <closeIcon.react tag="span" elementPosition="center" />
          </Button>
        </div>
        {view?.parent.results?.tracking ? (
          <a
            className="j2c-Sweep-mlflow"
            data-j2c="sweep-mlflow"
            href={view.parent.results.tracking.url}
            target="_blank"
            rel="noopener noreferrer"
          >
            {trans.__('MLflow parent run (child runs nested under it)')}
          </a>
        ) : null}
        {model.error ? (
          <div className="j2c-Jobs-error" role="alert">
            {trans.__('Cannot load the sweep: %1', model.error)}
          </div>
        ) : null}
        {view ? this._controls() : null}
        {view ? this._table() : null}
        {this._plot()}
      </div>
    );
  }

  private _controls(): JSX.Element {
    const trans = this._trans;
    const model = this.model;
    const axes = model.axes;
    const axis = model.axis;
    const axisValue = (a: PlotAxis | null) =>
      a === null ? '' : a.kind === 'step' ? 'step' : `param:${a.name}`;
    return (
      <div className="j2c-Sweep-controls">
        <label>
          {trans.__('Metric')}
          <select
            data-j2c="sweep-metric"
            value={model.metric}
            disabled={!model.metrics.length}
            onChange={event => model.setMetric(event.target.value)}
          >
            {model.metrics.length ? null : (
              <option value="">{trans.__('none yet')}</option>
            )}
            {model.metrics.map(name => (
              <option key={name} value={name}>
                {name}
              </option>
            ))}
          </select>
        </label>
        <label>
          {trans.__('Plot against')}
          <select
            data-j2c="sweep-axis"
            value={axisValue(axis)}
            disabled={!axes.length}
            onChange={event => {
              const chosen = axes.find(
                a => axisValue(a) === event.target.value
              );
              if (chosen) {
                model.setAxis(chosen);
              }
            }}
          >
            {axes.map(a => (
              <option key={axisValue(a)} value={axisValue(a)}>
                {a.kind === 'step' ? trans.__('step (per variant)') : a.name}
              </option>
            ))}
          </select>
        </label>
      </div>
    );
  }

  private _table(): JSX.Element {
    const trans = this._trans;
    const model = this.model;
    const keys = model.view?.keys ?? [];
    const metric = model.metric;
    const columns: [SweepColumn, string][] = [
      [{ kind: 'index' }, '#'],
      ...keys.map((name): [SweepColumn, string] => [
        { kind: 'param', name },
        name
      ]),
      [{ kind: 'status' }, trans.__('Status')],
      [{ kind: 'duration' }, trans.__('Duration')],
      [{ kind: 'exit' }, trans.__('Exit')],
      ...(metric
        ? [[{ kind: 'metric', name: metric }, metric] as [SweepColumn, string]]
        : [])
    ];
    const sort = model.sort;
    return (
      <div className="j2c-Sweep-tableWrap">
        <table className="j2c-SweepTable" data-j2c="sweep-table">
          <caption>
            {trans.__(
              'Variants of %1; choose a column header to sort, a row to open its log.',
              model.view?.parent.name ?? ''
            )}
          </caption>
          <thead>
            <tr>
              {columns.map(([column, label]) => {
                const sorted = sameColumn(sort.column, column);
                return (
                  <th
                    key={columnKey(column)}
                    scope="col"
                    data-column={columnKey(column)}
                    aria-sort={sorted ? sort.direction : 'none'}
                  >
                    <button
                      type="button"
                      className="j2c-SweepTable-sort"
                      onClick={() => model.sortBy(column)}
                    >
                      {label}
                      <span aria-hidden="true" className="j2c-SweepTable-arrow">
                        {sorted
                          ? sort.direction === 'ascending'
                            ? '▲'
                            : '▼'
                          : ''}
                      </span>
                    </button>
                  </th>
                );
              })}
            </tr>
          </thead>
          <tbody>
            {model.rows.map(variant => this._row(variant, keys, metric))}
          </tbody>
        </table>
      </div>
    );
  }

  private _row(
    variant: SweepVariant,
    keys: string[],
    metric: string
  ): JSX.Element {
    const trans = this._trans;
    const job = variant.job;
    const open = () => this._actions.openVariant(job.id);
    const value = metric ? variant.metrics?.[metric] : undefined;
    return (
      <tr
        key={job.id}
        className="j2c-SweepTable-row"
        data-job-id={job.id}
        data-index={variant.index}
        data-status={job.status}
        onClick={open}
      >
        <th scope="row">
          <button
            type="button"
            className="j2c-SweepTable-open"
            title={trans.__('Open the log of %1 (%2)', job.name, job.id)}
            onClick={event => {
              event.stopPropagation();
              open();
            }}
          >
            {variant.index}
          </button>
        </th>
        {keys.map(key => (
          <td key={key} data-column={`param:${key}`}>
            {variant.params?.[key] ?? ''}
          </td>
        ))}
        <td data-column="status">
          <span className={`j2c-Status j2c-Status-${job.status}`}>
            {job.status}
          </span>
        </td>
        <td data-column="duration">
          {job.started_at ? formatDuration(jobSeconds(job)) : ''}
        </td>
        <td data-column="exit">{job.exit_code ?? ''}</td>
        {metric ? (
          <td
            data-column={`metric:${metric}`}
            title={
              variant.metrics_source
                ? trans.__('from %1', variant.metrics_source)
                : undefined
            }
          >
            {formatMetric(value)}
          </td>
        ) : null}
      </tr>
    );
  }

  private _plot(): JSX.Element | null {
    const data = this.model.plot;
    if (!data) {
      return null;
    }
    return (
      <SweepPlot
        data={data}
        idPrefix={this._idPrefix}
        onPick={index => {
          const variant = this.model.view?.variants?.find(
            v => v.index === index
          );
          if (variant) {
            this._actions.openVariant(variant.job.id);
          }
        }}
      />
    );
  }

  private readonly _idPrefix: string;
}
