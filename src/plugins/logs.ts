/**
 * The log panels plugin: one panel per job in the main area, tracked and restored after a
 * reload, following the theme and the settings; the `j2c:open-log` command.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  IThemeManager,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { ReadonlyJSONObject } from '@lumino/coreutils';

import { jobsApi } from '../jobs';
import { LogPanel } from '../logpanel/panel';
import { showOutputs } from '../outputs';
import { createLogWidget } from '../logpanel/widget';
import { CommandIDs, IJ2C, ILogPanels } from '../tokens';

export const logsPlugin: JupyterFrontEndPlugin<ILogPanels> = {
  id: 'j2c:log-panels',
  description: 'Live log panels of j2c jobs.',
  autoStart: true,
  requires: [IJ2C, IDocumentManager],
  optional: [ILayoutRestorer, IThemeManager, ITranslator],
  provides: ILogPanels,
  activate: (
    app: JupyterFrontEnd,
    j2c: IJ2C,
    docManager: IDocumentManager,
    restorer: ILayoutRestorer | null,
    themes: IThemeManager | null,
    translator: ITranslator | null
  ): ILogPanels => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const tracker = new WidgetTracker<MainAreaWidget<LogPanel>>({
      namespace: 'j2c-log'
    });

    // The server copies it into the project (j2c-outputs/<job id>/), where it opens as a
    // document like any other: kernels, saving and the file browser work on it.
    const openNotebook = async (jobId: string, name: string): Promise<void> => {
      try {
        const { path } = await jobsApi.copyArtifact(jobId, name);
        docManager.openOrReveal(path);
      } catch (error) {
        Notification.error(
          trans.__(
            'Opening the executed notebook failed: %1',
            String((error as Error).message ?? error)
          ),
          { autoClose: 5000 }
        );
      }
    };

    const open = async (
      jobId: string,
      activate = true
    ): Promise<MainAreaWidget<LogPanel>> => {
      const existing = tracker.find(widget => widget.content.jobId === jobId);
      if (existing) {
        if (activate) {
          app.shell.activateById(existing.id);
        }
        return existing;
      }
      const settings = j2c.settings.current;
      const panel = new LogPanel({
        jobId,
        jobs: j2c.jobs,
        trans,
        scrollback: settings.scrollback,
        follow: settings.followLogs,
        screenReader: j2c.settings.screenReader,
        openNotebook,
        showOutputs: jobId => showOutputs(app.commands, jobId, trans)
      });
      const widget = createLogWidget(panel, trans);
      void tracker.add(widget);
      app.shell.add(widget, 'main', { activate });
      return widget;
    };

    app.commands.addCommand(CommandIDs.openLog, {
      label: trans.__('Open Job Log'),
      execute: args => {
        const id = (args as ReadonlyJSONObject).id;
        if (typeof id !== 'string') {
          throw new Error('j2c:open-log needs a job id');
        }
        return open(id, args.activate !== false);
      }
    });

    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openLog,
        args: widget => ({ id: widget.content.jobId, activate: false }),
        name: widget => widget.content.jobId
      });
    }

    themes?.themeChanged.connect(() => {
      // The new theme's CSS variables apply on the next frame.
      requestAnimationFrame(() =>
        tracker.forEach(widget => widget.content.view.applyTheme())
      );
    });
    j2c.settings.changed.connect((_, settings) => {
      tracker.forEach(widget => {
        widget.content.view.setScrollback(settings.scrollback);
        widget.content.view.setScreenReaderMode(j2c.settings.screenReader);
      });
    });

    return { open };
  }
};
