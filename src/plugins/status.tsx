/**
 * The status bar item ("2 jobs running") and a notification when a job ends; a sweep gets one
 * notification, updated as its variants end (`sweep/notices.ts`), never one per variant.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { IStatusBar, TextItem } from '@jupyterlab/statusbar';
import {
  ITranslator,
  TranslationBundle,
  nullTranslator
} from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { endedMessage, notifyInBrowser } from '../browserNotify';
import { computeIcon } from '../icons';
import { JobsModel } from '../jobs';
import { JobStatus } from '../models';
import { SIDEBAR_ID } from '../sidebar/widget';
import { SweepNotices } from '../sweep/notices';
import { sweepOf } from '../sweep/records';
import { CommandIDs, IJ2C, ILogPanels } from '../tokens';

class RunningJobs extends ReactWidget {
  constructor(
    private readonly _jobs: JobsModel,
    private readonly _trans: TranslationBundle,
    onClick: () => void
  ) {
    super();
    this.addClass('j2c-StatusItem');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', onClick);
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        onClick();
      }
    });
    _jobs.changed.connect(() => this.update(), this);
  }

  render(): JSX.Element {
    const count = this._jobs.active.length;
    const text = this._trans._n('%1 job running', '%1 jobs running', count);
    this.node.title = this._trans.__('%1: show the Compute panel', text);
    return (
      <>
        <computeIcon.react tag="span" stylesheet="statusBar" />
        <TextItem source={text} />
      </>
    );
  }
}

export const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'j2c:status',
  description: 'Running j2c jobs in the status bar.',
  autoStart: true,
  requires: [IJ2C],
  optional: [IStatusBar, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    j2c: IJ2C,
    statusBar: IStatusBar | null,
    translator: ITranslator | null
  ) => {
    if (!statusBar) {
      return;
    }
    const trans = (translator ?? nullTranslator).load('j2c');
    const item = new RunningJobs(j2c.jobs, trans, () =>
      app.shell.activateById(SIDEBAR_ID)
    );
    statusBar.registerStatusItem('j2c:running', {
      item,
      align: 'left',
      rank: 5,
      isActive: () => j2c.jobs.active.length > 0,
      activeStateChanged: j2c.jobs.changed
    });
  }
};

const NOTIFY_TYPE: { [status in JobStatus]?: Notification.TypeOptions } = {
  succeeded: 'success',
  failed: 'error',
  lost: 'error',
  cancelled: 'warning'
};

export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'j2c:notifications',
  description: 'A notification when a j2c job ends.',
  autoStart: true,
  requires: [IJ2C, ILogPanels],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    j2c: IJ2C,
    panels: ILogPanels,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const openResults = (id: string): void =>
      void panels.open(id).then(widget => widget.content.showResults());
    const sweeps = new SweepNotices({
      trans,
      preferredMetric: () => j2c.settings.current.listMetric,
      openSweep: id => void app.commands.execute(CommandIDs.openSweep, { id })
    });
    j2c.jobs.ended.connect((_, record) => {
      const sweep = sweepOf(record);
      if (sweep?.role === 'child') {
        // A variant: its sweep's one notification follows it (the browser's waits for the end).
        if (j2c.settings.current.notifications) {
          sweeps.variantEnded(sweep.parent, j2c.jobs.find(sweep.parent));
        }
        return;
      }
      if (j2c.settings.current.notifyInBrowser) {
        notifyInBrowser(record, trans, () =>
          sweep
            ? void app.commands.execute(CommandIDs.openSweep, { id: record.id })
            : openResults(record.id)
        );
      }
      if (!j2c.settings.current.notifications) {
        return;
      }
      if (sweep?.role === 'parent') {
        void sweeps.sweepEnded(record);
        return;
      }
      Notification.emit(
        endedMessage(record, trans),
        NOTIFY_TYPE[record.status] ?? 'info',
        {
          autoClose: 10000,
          actions: [
            {
              label: trans.__('Open log'),
              callback: () => void panels.open(record.id)
            },
            {
              label: trans.__('Open results'),
              callback: () => openResults(record.id)
            }
          ]
        }
      );
    });
  }
};
