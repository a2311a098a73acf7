/**
 * "Show outputs": a finished job's outputs copied into its project (`j2c-outputs/<job id>/`,
 * next to the notebook or script that sent it) and that folder opened in the file browser,
 * where the user opens, downloads or moves them like any other file. Files not copied are
 * named with why.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';

import { jobsApi } from './jobs';

export async function showOutputs(
  commands: JupyterFrontEnd['commands'],
  jobId: string,
  trans: TranslationBundle
): Promise<void> {
  try {
    const copy = await jobsApi.copyAllArtifacts(jobId);
    await commands.execute('filebrowser:go-to-path', {
      path: copy.folder,
      dontShowBrowser: false
    });
    const failed = copy.failed ?? [];
    if (failed.length) {
      Notification.warning(
        trans._n(
          '%1 output was not copied: %2',
          '%1 outputs were not copied: %2',
          failed.length,
          failed.map(item => `${item.name} (${item.error})`).join(', ')
        ),
        { autoClose: 8000 }
      );
    }
  } catch (error) {
    Notification.error(
      trans.__(
        'Showing the outputs failed: %1',
        String((error as Error).message ?? error)
      ),
      { autoClose: 5000 }
    );
  }
}
