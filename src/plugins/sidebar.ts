/**
 * The sidebar plugin: the left "Compute" panel (form + jobs list). While the user has not typed
 * a project, entry point or venv, the form follows the current .py or .ipynb document.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { computeIcon } from '../icons';
import { JobRecord } from '../models';
import { ComputeSidebar } from '../sidebar/widget';
import { CommandIDs, IJ2C, ILogPanels } from '../tokens';
import { isRunnable } from './documents';

export const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: 'j2c:sidebar',
  description: 'The Compute sidebar: send a job, see the jobs.',
  autoStart: true,
  requires: [IJ2C, ILogPanels, ILabShell],
  optional: [IDocumentManager, ILayoutRestorer, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    j2c: IJ2C,
    panels: ILogPanels,
    labShell: ILabShell,
    docManager: IDocumentManager | null,
    restorer: ILayoutRestorer | null,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const failed = (what: string) => (error: unknown) => {
      Notification.error(
        trans.__(
          '%1 failed: %2',
          what,
          (error as Error).message ?? String(error)
        ),
        {
          autoClose: 5000
        }
      );
    };
    const sidebar = new ComputeSidebar({
      config: j2c.config,
      form: j2c.form,
      jobs: j2c.jobs,
      translator: translator ?? nullTranslator,
      onSend: () => void app.commands.execute(CommandIDs.submitForm),
      actions: {
        open: (record: JobRecord) => void panels.open(record.id),
        cancel: (record: JobRecord) =>
          j2c.jobs.cancel(record.id).catch(failed(trans.__('Cancel'))),
        rerun: (record: JobRecord) =>
          j2c.jobs
            .rerun(record)
            .then(
              next => void panels.open(next.id),
              failed(trans.__('Run again'))
            ),
        remove: (record: JobRecord) =>
          j2c.jobs.remove(record.id).catch(failed(trans.__('Remove')))
      }
    });
    sidebar.title.icon = computeIcon;
    labShell.add(sidebar, 'left', { rank: 600 });
    restorer?.add(sidebar, 'j2c-sidebar');

    let followed = '';
    const follow = (): void => {
      const widget = labShell.currentWidget;
      const path = widget && docManager?.contextForWidget(widget)?.path;
      if (
        path &&
        path !== followed &&
        isRunnable(path) &&
        !j2c.form.pathsEdited
      ) {
        followed = path;
        void j2c.form.fillFor(path);
      }
    };
    labShell.currentChanged.connect(follow);
    void app.restored.then(follow);
  }
};
