/**
 * The left "Compute" sidebar: a header with the server's set-up, the form that sends a job and
 * the jobs list, as the collapsible sections of a JupyterLab `SidePanel`; its tab counts the jobs
 * that ended since the user last looked (`badge.ts`).
 */
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget, SidePanel } from '@jupyterlab/ui-components';
import { AccordionPanel } from '@lumino/widgets';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { JobsModel } from '../jobs';
import { ServerConfig } from '../models';
import { J2CSettings } from '../settings';
import { SweepModel } from '../sweep/model';
import { SweepViewWidget } from '../sweep/view';
import { EndedBadge } from './badge';
import { ComputeFormWidget } from './form';
import { IJobActions, JobsListWidget } from './jobslist';
import { ComputeForm } from './model';

export const SIDEBAR_ID = 'j2c-compute-sidebar';

/** The server's set-up, or why it cannot be reached. */
class ServerFacts extends ReactWidget {
  constructor(
    config: Promise<ServerConfig>,
    private readonly _trans: TranslationBundle
  ) {
    super();
    this.addClass('j2c-Sidebar-header');
    config.then(
      value => {
        this._config = value;
        this.update();
      },
      (reason: Error) => {
        this._error = reason.message;
        this.update();
      }
    );
  }

  render(): JSX.Element {
    const trans = this._trans;
    const config = this._config;
    return (
      <>
        <h2 className="j2c-Sidebar-title">{trans.__('Compute')}</h2>
        {this._error ? (
          <div className="j2c-Sidebar-error" role="alert">
            {this._error}
          </div>
        ) : config ? (
          <dl className="j2c-Sidebar-facts">
            <dt>{trans.__('Scheduler')}</dt>
            <dd data-j2c="scheduler">{config.default_scheduler}</dd>
            <dt>{trans.__('Storage')}</dt>
            <dd data-j2c="storage">{config.storage_kind}</dd>
          </dl>
        ) : (
          <div className="j2c-Sidebar-loading">{trans.__('Connecting…')}</div>
        )}
      </>
    );
  }

  private _config: ServerConfig | null = null;
  private _error: string | null = null;
}

export class ComputeSidebar extends SidePanel {
  constructor(options: ComputeSidebar.IOptions) {
    super({ translator: options.translator });
    const trans = options.translator.load('j2c');
    this._j2cTrans = trans;
    this._options = options;
    this.id = SIDEBAR_ID;
    this.addClass('j2c-Sidebar');
    this.title.caption = trans.__('Compute');
    this.header.addWidget(new ServerFacts(options.config, trans));
    this.addWidget(
      new ComputeFormWidget({
        form: options.form,
        trans,
        onSend: options.onSend
      })
    );
    this.addWidget(
      new JobsListWidget(
        options.jobs,
        { ...options.actions, openSweep: record => this.openSweep(record.id) },
        trans,
        options.settings
      )
    );
    this.badge = new EndedBadge(
      options.jobs,
      this.title,
      trans,
      () => this.isVisible && document.visibilityState === 'visible'
    );
    document.addEventListener('visibilitychange', this._onVisibility);
  }

  /** The count on the tab of jobs that ended since the user last looked. */
  readonly badge: EndedBadge;

  /**
   * Unfold the form (after "Run again…" filled it) and put the focus in `fieldId`'s control,
   * the field the user most likely changes.
   */
  showForm(fieldId = 'j2c-field-args'): void {
    const accordion = this.content as AccordionPanel;
    accordion.expand(0);
    requestAnimationFrame(() => {
      const field = document.getElementById(fieldId);
      field?.scrollIntoView({ block: 'center' });
      field?.focus();
    });
  }

  /** The sweep view shown, if any. */
  get sweep(): SweepViewWidget | null {
    return this._sweep;
  }

  /**
   * Show the sweep view of `parentId` as a section of this panel, expanded (one sweep at a
   * time: another sweep's view is replaced).
   */
  openSweep(parentId: string): SweepViewWidget {
    let view = this._sweep;
    if (!view || view.isDisposed || view.model.parentId !== parentId) {
      view?.dispose();
      const options = this._options;
      const model = new SweepModel({
        parentId,
        preferredMetric: options.settings?.current.listMetric ?? ''
      });
      view = new SweepViewWidget(
        model,
        {
          openVariant: jobId => options.openLog(jobId),
          close: () => this._sweep?.dispose()
        },
        this._j2cTrans
      );
      view.disposed.connect(() => {
        if (this._sweep === view) {
          this._sweep = null;
        }
      });
      this._sweep = view;
      // Above the jobs list, which stays in reach below it.
      this.insertWidget(this.widgets.length - 1, view);
    }
    const accordion = this.content as AccordionPanel;
    const index = this.widgets.indexOf(view);
    accordion.expand(index);
    // The form folds away (one click brings it back): the table and plot need the height.
    if (this.widgets.length > 2) {
      accordion.collapse(0);
    }
    accordion.setRelativeSizes(
      this.widgets.map((widget, i) => (i === index ? 3 : 1))
    );
    void view.model.refresh();
    return view;
  }

  dispose(): void {
    document.removeEventListener('visibilitychange', this._onVisibility);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.badge.update();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.badge.update();
  }

  private readonly _onVisibility = (): void => this.badge.update();
  private readonly _j2cTrans: TranslationBundle;
  private readonly _options: ComputeSidebar.IOptions;
  private _sweep: SweepViewWidget | null = null;
}

export namespace ComputeSidebar {
  export interface IOptions {
    config: Promise<ServerConfig>;
    form: ComputeForm;
    jobs: JobsModel;
    actions: IJobActions;
    /** Open the log panel of a job by id (a sweep variant's row). */
    openLog: (jobId: string) => void;
    onSend: () => void;
    /** The user's settings: which metric the jobs list shows. */
    settings?: J2CSettings;
    translator: ITranslator;
  }
}
