/**
 * The j2c JupyterLab plugin: checks that the server extension answers, then adds the
 * Compute sidebar.
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { showErrorMessage } from '@jupyterlab/apputils';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';

import { J2CRequestError, requestAPI } from './request';
import { ComputeSidebar } from './sidebar';
import { IServerInfo } from './tokens';

const PLUGIN_ID = 'j2c:plugin';

const computeIconSvg =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<path class="jp-icon3" fill="#616161" d="M4 4h16v10H4zM2 16h20v2H2zm5 3h10v1H7z' +
  'M9 7l-2 3h3l-1 3 4-4h-3l1-2z"/></svg>';

export const computeIcon = new LabIcon({
  name: 'j2c:compute',
  svgstr: computeIconSvg
});

/** Ask the server for its j2c configuration; explain clearly when it is missing. */
async function loadServerInfo(
  trans: ReturnType<ITranslator['load']>
): Promise<IServerInfo> {
  try {
    return await requestAPI<IServerInfo>('config');
  } catch (error) {
    const missing = error instanceof J2CRequestError && error.status === 404;
    const message = missing
      ? trans.__(
          'The j2c server extension is not running on this Jupyter server, so jobs cannot be sent. ' +
            'Install j2c in the environment that runs the server (pip install j2c) and restart it; ' +
            'on JupyterHub, ask your administrator to add j2c to the single-user image.'
        )
      : trans.__('The j2c server extension failed to answer: %1', String(error));
    void showErrorMessage(trans.__('j2c server extension'), message);
    throw new Error(message);
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Send a project and its venv to a GPU cluster, with live logs.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const info = loadServerInfo(trans);
    const sidebar = new ComputeSidebar(info, translator ?? nullTranslator);
    sidebar.title.icon = computeIcon;
    labShell.add(sidebar, 'left', { rank: 600 });
    info.then(
      () => console.log('j2c: server extension is active'),
      () => undefined
    );
  }
};

export default plugin;
