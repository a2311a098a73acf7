/**
 * The left "Compute" sidebar panel: where a user describes and sends a job, and sees
 * the jobs already sent.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import * as React from 'react';

import { IServerInfo } from './tokens';

/** Shown while the server's answer is pending or when it failed. */
function ServerStatus(props: {
  info: IServerInfo | null;
  error: string | null;
  trans: ReturnType<ITranslator['load']>;
}): JSX.Element {
  const { info, error, trans } = props;
  if (error) {
    return <div className="j2c-Sidebar-error">{error}</div>;
  }
  if (!info) {
    return <div className="j2c-Sidebar-loading">{trans.__('Connecting…')}</div>;
  }
  return (
    <dl className="j2c-Sidebar-facts">
      <dt>{trans.__('Scheduler')}</dt>
      <dd data-j2c="scheduler">{info.default_scheduler}</dd>
      <dt>{trans.__('Storage')}</dt>
      <dd data-j2c="storage">{info.storage_kind}</dd>
      <dt>{trans.__('Image')}</dt>
      <dd data-j2c="image">{info.default_image ?? trans.__('(lab image)')}</dd>
    </dl>
  );
}

/** The Compute panel widget. */
export class ComputeSidebar extends ReactWidget {
  constructor(
    private readonly _info: Promise<IServerInfo>,
    translator: ITranslator = nullTranslator
  ) {
    super();
    this._trans = translator.load('j2c');
    this.id = 'j2c-compute-sidebar';
    this.addClass('j2c-Sidebar');
    this.title.caption = this._trans.__('Compute');
    this._info.then(
      info => {
        this._serverInfo = info;
        this.update();
      },
      (reason: Error) => {
        this._error = reason.message;
        this.update();
      }
    );
  }

  render(): JSX.Element {
    return (
      <div className="j2c-Sidebar-body">
        <h2 className="j2c-Sidebar-title">{this._trans.__('Compute')}</h2>
        <ServerStatus
          info={this._serverInfo}
          error={this._error}
          trans={this._trans}
        />
      </div>
    );
  }

  private readonly _trans: ReturnType<ITranslator['load']>;
  private _serverInfo: IServerInfo | null = null;
  private _error: string | null = null;
}
