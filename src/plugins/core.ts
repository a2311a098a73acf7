/**
 * The core plugin (`j2c:plugin`, which owns the settings): checks that the server extension
 * answers, and provides the job list, the Compute form and the settings to the other plugins.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { showErrorMessage } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import {
  ITranslator,
  TranslationBundle,
  nullTranslator
} from '@jupyterlab/translation';

import { JobsModel, jobsApi } from '../jobs';
import { ServerConfig } from '../models';
import { J2CRequestError } from '../request';
import { J2CSettings } from '../settings';
import { ComputeForm } from '../sidebar/model';
import { IJ2C } from '../tokens';

export const PLUGIN_ID = 'j2c:plugin';

/** Ask the server for its j2c set-up; explain clearly when the extension is missing. */
async function loadServerConfig(
  trans: TranslationBundle
): Promise<ServerConfig> {
  try {
    return await jobsApi.config();
  } catch (error) {
    const missing = error instanceof J2CRequestError && error.status === 404;
    const message = missing
      ? trans.__(
          'The j2c server extension is not running on this Jupyter server, so jobs cannot be sent. ' +
            'Install j2c in the environment that runs the server (pip install j2c) and restart it; ' +
            'on JupyterHub, ask your administrator to add j2c to the single-user image.'
        )
      : trans.__(
          'The j2c server extension failed to answer: %1',
          String(error)
        );
    void showErrorMessage(trans.__('j2c server extension'), message);
    throw new Error(message);
  }
}

export const corePlugin: JupyterFrontEndPlugin<IJ2C> = {
  id: PLUGIN_ID,
  description: 'Send a project and its venv to a GPU cluster, with live logs.',
  autoStart: true,
  provides: IJ2C,
  optional: [ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    registry: ISettingRegistry | null,
    translator: ITranslator | null
  ): IJ2C => {
    const trans = (translator ?? nullTranslator).load('j2c');
    const config = loadServerConfig(trans);
    const settings = new J2CSettings();
    if (registry) {
      registry.load(PLUGIN_ID).then(
        loaded => settings.follow(loaded),
        reason => console.error('j2c: cannot load the settings', reason)
      );
      settings.followTerminal(registry);
    }
    const jobs = new JobsModel();
    settings.changed.connect((_, current) => {
      jobs.pageSize = current.jobsPageSize;
    });
    const form = new ComputeForm({
      contents: app.serviceManager.contents,
      jobs,
      settings,
      trans
    });
    config.then(
      value => {
        form.setConfig(value);
        console.log('j2c: server extension is active');
      },
      () => undefined
    );
    return { config, jobs, form, settings };
  }
};
