/**
 * The sidebar plugin: the left "Compute" panel (form + jobs list). While the user has not typed
 * a project, entry point or venv, the form follows the current .py or .ipynb document (and a
 * notebook's kernel, whose venv it proposes).
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { Kernel } from '@jupyterlab/services';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { shortId } from '../format';
import { computeIcon } from '../icons';
import { JobRecord } from '../models';
import { showOutputs } from '../outputs';
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
      settings: j2c.settings,
      translator: translator ?? nullTranslator,
      onSend: () => void app.commands.execute(CommandIDs.submitForm),
      openLog: (jobId: string) => void panels.open(jobId),
      actions: {
        open: (record: JobRecord) => void panels.open(record.id),
        cancel: (record: JobRecord) =>
          j2c.jobs.cancel(record.id).catch(failed(trans.__('Cancel'))),
        rerun: (record: JobRecord) => {
          j2c.form.fillFromJob(record);
          labShell.activateById(sidebar.id);
          sidebar.showForm();
        },
        remove: async (record: JobRecord) => {
          const answer = await showDialog({
            title: trans.__('Remove job %1?', record.name),
            body: trans.__(
              'The record and log of job %1 (%2) are forgotten; outputs already copied into the project stay.',
              record.name,
              shortId(record.id)
            ),
            buttons: [
              Dialog.cancelButton(),
              Dialog.warnButton({ label: trans.__('Remove') })
            ]
          });
          if (answer.button.accept) {
            await j2c.jobs.remove(record.id).catch(failed(trans.__('Remove')));
          }
        },
        showOutputs: (record: JobRecord) =>
          void showOutputs(app.commands, record.id, trans)
      }
    });
    sidebar.title.icon = computeIcon;
    labShell.add(sidebar, 'left', { rank: 600 });
    app.commands.addCommand(CommandIDs.openSweep, {
      label: trans.__('Open Sweep View'),
      execute: args => {
        const id = args.id;
        if (typeof id !== 'string') {
          throw new Error('j2c:open-sweep needs the sweep job id');
        }
        labShell.activateById(sidebar.id);
        sidebar.openSweep(id);
      }
    });
    restorer?.add(sidebar, 'j2c-sidebar');

    let followed = '';
    /** Describe the followed file again once `kernel` answers (its venv is the default). */
    const refillWhenReady = (
      path: string,
      kernel: Kernel.IKernelConnection
    ): void => {
      void kernel.info.then(
        () => {
          if (path === followed && !j2c.form.pathsEdited) {
            void j2c.form.fillFor(path, kernel);
          }
        },
        () => undefined
      );
    };
    // A notebook's kernel starts (or is changed) after its tab opens.
    const watched = new WeakSet<DocumentRegistry.Context>();
    const watch = (context: DocumentRegistry.Context): void => {
      if (!watched.has(context)) {
        watched.add(context);
        context.sessionContext.kernelChanged.connect((_, change) => {
          if (change.newValue && context.path === followed) {
            refillWhenReady(context.path, change.newValue);
          }
        });
      }
    };
    const follow = (): void => {
      const widget = labShell.currentWidget;
      const context = widget ? docManager?.contextForWidget(widget) : undefined;
      const path = context?.path;
      if (
        context &&
        path &&
        path !== followed &&
        isRunnable(path) &&
        !j2c.form.pathsEdited
      ) {
        followed = path;
        watch(context);
        const kernel = context.sessionContext.session?.kernel;
        const answers = kernel?.status === 'idle' || kernel?.status === 'busy';
        void j2c.form.fillFor(path, answers ? kernel : null);
        if (kernel && !answers) {
          refillWhenReady(path, kernel);
        }
      }
    };
    labShell.currentChanged.connect(follow);
    void app.restored.then(follow);
  }
};
