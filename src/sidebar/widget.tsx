/**
 * The left "Compute" sidebar: a header with the server's set-up, the form that sends a job and
 * the jobs list, as the collapsible sections of a JupyterLab `SidePanel`; its tab counts the jobs
 * that ended since the user last looked (`badge.ts`).
 */
import { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget, SidePanel } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { JobsModel } from '../jobs';
import { ServerConfig } from '../models';
import { J2CSettings } from '../settings';
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
      new JobsListWidget(options.jobs, options.actions, trans, options.settings)
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
}

export namespace ComputeSidebar {
  export interface IOptions {
    config: Promise<ServerConfig>;
    form: ComputeForm;
    jobs: JobsModel;
    actions: IJobActions;
    onSend: () => void;
    /** The user's settings: which metric the jobs list shows. */
    settings?: J2CSettings;
    translator: ITranslator;
  }
}
