/**
 * Ways to send a job: the "Send to Compute" button of notebook and Python editor toolbars
 * (declared in the settings schema), the file browser's context menu on .py/.ipynb files,
 * the command palette, and the sidebar's own button. All go through one flow: fill the form
 * for the file, save what is unsaved, send, open the log (a sweep's: the sweep view).
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IToolbarWidgetRegistry,
  Notification
} from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { DocumentWidget } from '@jupyterlab/docregistry';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import {
  ITranslator,
  TranslationBundle,
  nullTranslator
} from '@jupyterlab/translation';
import { ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { computeIcon } from '../icons';
import { JobRecord } from '../models';
import { IFormProblem } from '../sidebar/model';
import { SIDEBAR_ID } from '../sidebar/widget';
import { sweepOf } from '../sweep/records';
import { CommandIDs, IJ2C, ILogPanels } from '../tokens';
import { isRunnable, saveBeforeSending } from './documents';

/** Changed paths named in the notification; the rest are counted in the server's message. */
const CHANGES_SHOWN = 3;

/**
 * What the server decided for this send, in its words: attached to an unchanged job, or a new
 * job and why (with the first changed paths). Null when the answer carries no decision.
 */
function decisionText(
  record: JobRecord,
  trans: TranslationBundle
): string | null {
  const decision = record.decision;
  if (!decision) {
    return null;
  }
  const changes = (decision.changes ?? []).slice(0, CHANGES_SHOWN);
  const listed = changes.length
    ? ` (${changes.map(c => `${c.path} ${c.change}`).join(', ')}${
        (decision.changed_files ?? 0) > changes.length ? ', …' : ''
      })`
    : '';
  const text = `${decision.message}${listed}`;
  return decision.attached
    ? trans.__('%1. Use "Run again" in the jobs list for a new run.', text)
    : trans.__('%1.', text);
}

/** "Not sent: Entry point: 'nope.py' is not a file" (and how many more), for the toast. */
function problemsText(
  problems: IFormProblem[],
  trans: TranslationBundle
): string {
  const first = problems[0];
  const said = first.label ? `${first.label}: ${first.message}` : first.message;
  return problems.length > 1
    ? trans._n(
        'Not sent: %2 (and %1 more problem, listed beside the Send button)',
        'Not sent: %2 (and %1 more problems, listed beside the Send button)',
        problems.length - 1,
        said
      )
    : trans.__('Not sent: %1', said);
}

export const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'j2c:commands',
  description:
    'Send to Compute: toolbar button, context menu and palette commands.',
  autoStart: true,
  requires: [IJ2C, ILogPanels, IDocumentManager, ILabShell],
  optional: [
    ICommandPalette,
    IFileBrowserFactory,
    IToolbarWidgetRegistry,
    ITranslator
  ],
  activate: (
    app: JupyterFrontEnd,
    j2c: IJ2C,
    panels: ILogPanels,
    docManager: IDocumentManager,
    labShell: ILabShell,
    palette: ICommandPalette | null,
    browsers: IFileBrowserFactory | null,
    toolbars: IToolbarWidgetRegistry | null,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const { commands } = app;
    const form = j2c.form;

    const currentPath = (): string | null => {
      const widget = labShell.currentWidget;
      const path = widget
        ? docManager.contextForWidget(widget)?.path
        : undefined;
      return path && isRunnable(path) ? path : null;
    };

    const selectedPath = (): string | null => {
      const item = browsers?.tracker.currentWidget?.selectedItems().next();
      const path = item && !item.done ? item.value.path : null;
      return path && isRunnable(path) ? path : null;
    };

    /** Send the form as it is; on a field error, show the sidebar where it is marked. */
    const sendForm = async (): Promise<void> => {
      const { project, entry } = form.values;
      const entryPath = PathExt.join(project, entry);
      if (
        !(await saveBeforeSending(app, docManager, project, entryPath, trans))
      ) {
        return;
      }
      const record = await form.submit();
      if (!record) {
        app.shell.activateById(SIDEBAR_ID);
        const problems = form.problems;
        if (problems.length) {
          Notification.error(problemsText(problems, trans), {
            autoClose: 8000
          });
        }
        return;
      }
      const decided = decisionText(record, trans);
      if (decided !== null) {
        Notification.info(decided, { autoClose: 8000 });
      }
      // A sweep opens as the jobs list's "Open sweep view" does: its variants, not one log.
      const sweep = sweepOf(record)?.role === 'parent';
      const open = (): Promise<unknown> =>
        sweep
          ? commands.execute(CommandIDs.openSweep, { id: record.id })
          : panels.open(record.id);
      if (form.values.noWait) {
        Notification.info(
          sweep
            ? trans.__('Sent %1 as sweep %2.', record.name, record.id)
            : trans.__('Sent %1 as job %2.', record.name, record.id),
          {
            autoClose: 5000,
            actions: [
              {
                label: sweep
                  ? trans.__('Open sweep view')
                  : trans.__('Open log'),
                callback: () => void open()
              }
            ]
          }
        );
      } else {
        await open();
      }
    };

    /** The running kernel of `path`'s open notebook, if any: its venv is the default. */
    const kernelOf = (path: string) => {
      const widget = docManager.findWidget(path);
      const context = widget ? docManager.contextForWidget(widget) : undefined;
      return context?.sessionContext.session?.kernel ?? null;
    };

    const sendFile = async (path: string): Promise<void> => {
      await form.fillFor(path, kernelOf(path));
      await sendForm();
    };

    commands.addCommand(CommandIDs.send, {
      label: trans.__('Send to Compute'),
      caption: trans.__(
        'Send this file, its project and its venv to the compute cluster'
      ),
      icon: computeIcon,
      isEnabled: args =>
        typeof args.path === 'string' || currentPath() !== null,
      execute: args => {
        const path = typeof args.path === 'string' ? args.path : currentPath();
        return path ? sendFile(path) : undefined;
      }
    });

    commands.addCommand(CommandIDs.sendSelected, {
      label: trans.__('Send to Compute'),
      caption: trans.__(
        'Send this file, its project and its venv to the compute cluster'
      ),
      icon: computeIcon,
      isVisible: () => selectedPath() !== null,
      execute: () => {
        const path = selectedPath();
        return path ? sendFile(path) : undefined;
      }
    });

    commands.addCommand(CommandIDs.submitForm, {
      label: trans.__('Send the Compute Form'),
      execute: () => sendForm()
    });

    commands.addCommand(CommandIDs.showPanel, {
      label: trans.__('Show the Compute Panel'),
      execute: () => app.shell.activateById(SIDEBAR_ID)
    });

    const category = trans.__('Compute');
    palette?.addItem({ command: CommandIDs.send, category });
    palette?.addItem({ command: CommandIDs.showPanel, category });

    // The toolbar items are declared in schema/plugin.json; this draws them with a label.
    const button =
      (kind: 'Notebook' | 'Editor') =>
      (widget: Widget): Widget => {
        const context =
          widget instanceof DocumentWidget
            ? widget.context
            : docManager.contextForWidget(widget);
        const item = new ToolbarButton({
          icon: computeIcon,
          label: trans.__('Send to Compute'),
          tooltip: trans.__(
            'Send this file, its project and its venv to the compute cluster'
          ),
          onClick: () => {
            if (context) {
              void commands.execute(CommandIDs.send, { path: context.path });
            }
          }
        });
        item.addClass('j2c-SendButton');
        if (kind === 'Editor') {
          // The editor toolbar is shared by every text file: show the button on scripts only.
          const showForScripts = (): void =>
            item.setHidden(PathExt.extname(context?.path ?? '') !== '.py');
          showForScripts();
          context?.pathChanged.connect(showForScripts);
        }
        return item;
      };
    toolbars?.addFactory('Notebook', 'j2c-send', button('Notebook'));
    toolbars?.addFactory('Editor', 'j2c-send', button('Editor'));
  }
};
