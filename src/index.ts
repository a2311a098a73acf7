/**
 * The j2c JupyterLab extension: send a project and its venv to a compute cluster, follow the
 * job's log live, keep a history. Each plugin lives in `plugins/`.
 */
import { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { commandsPlugin } from './plugins/commands';
import { corePlugin } from './plugins/core';
import { logsPlugin } from './plugins/logs';
import { sidebarPlugin } from './plugins/sidebar';
import { notificationsPlugin, statusPlugin } from './plugins/status';

export * from './tokens';

const plugins: JupyterFrontEndPlugin<unknown>[] = [
  corePlugin,
  logsPlugin,
  sidebarPlugin,
  commandsPlugin,
  statusPlugin,
  notificationsPlugin
];

export default plugins;
