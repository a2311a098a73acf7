/** Which documents can be sent, and saving the project's unsaved ones before a job ships. */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { TranslationBundle } from '@jupyterlab/translation';

/** A script or a notebook: what can be an entry point. */
export function isRunnable(path: string): boolean {
  return ['.py', '.ipynb'].includes(PathExt.extname(path).toLowerCase());
}

function inside(path: string, folder: string): boolean {
  return (
    folder === '' ||
    folder === '.' ||
    path === folder ||
    path.startsWith(`${folder}/`)
  );
}

/**
 * Save what the job would otherwise ship stale. The entry point is saved without asking (the
 * user asked to run it); other unsaved files of the project are listed in a dialog: save them,
 * send the versions on disk, or cancel. False when the user cancelled.
 */
export async function saveBeforeSending(
  app: JupyterFrontEnd,
  docManager: IDocumentManager,
  project: string,
  entry: string,
  trans: TranslationBundle
): Promise<boolean> {
  const dirty = new Map<string, DocumentRegistry.Context>();
  for (const widget of app.shell.widgets('main')) {
    const context = docManager.contextForWidget(widget);
    if (context?.model.dirty && inside(context.path, project)) {
      dirty.set(context.path, context);
    }
  }
  const entryContext = dirty.get(entry);
  if (entryContext) {
    await entryContext.save();
    dirty.delete(entry);
  }
  if (!dirty.size) {
    return true;
  }
  const names = [...dirty.keys()]
    .map(path => PathExt.basename(path))
    .join(', ');
  const result = await showDialog({
    title: trans.__('Save before sending?'),
    body: trans.__(
      'These files of the project have unsaved changes: %1. The job ships the versions on disk.',
      names
    ),
    buttons: [
      Dialog.cancelButton(),
      Dialog.warnButton({ label: trans.__('Send as on disk') }),
      Dialog.okButton({ label: trans.__('Save and send') })
    ],
    defaultButton: 2
  });
  if (!result.button.accept) {
    return false;
  }
  if (result.button.displayType !== 'warn') {
    await Promise.all([...dirty.values()].map(context => context.save()));
  }
  return true;
}
