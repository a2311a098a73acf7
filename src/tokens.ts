/** What the j2c plugins provide to each other (and to other extensions). */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Token } from '@lumino/coreutils';

import { JobsModel } from './jobs';
import { LogPanel } from './logpanel/panel';
import { ServerConfig } from './models';
import { J2CSettings } from './settings';
import { ComputeForm } from './sidebar/model';

/** What GET /j2c/api/config answers. */
export type IServerInfo = ServerConfig;

/** The shared state: the server's set-up, the job list, the Compute form, the settings. */
export interface IJ2C {
  readonly config: Promise<ServerConfig>;
  readonly jobs: JobsModel;
  readonly form: ComputeForm;
  readonly settings: J2CSettings;
}

export const IJ2C = new Token<IJ2C>(
  'j2c:core',
  'The j2c job list, Compute form, settings and server set-up.'
);

/** Opens (or reveals) the log panel of a job. */
export interface ILogPanels {
  open(jobId: string, activate?: boolean): Promise<MainAreaWidget<LogPanel>>;
}

export const ILogPanels = new Token<ILogPanels>(
  'j2c:log-panels',
  'Opens the live log panel of a j2c job.'
);

/** Command ids, shared by the plugins, the settings schema and the tests. */
export const CommandIDs = {
  send: 'j2c:send',
  sendSelected: 'j2c:send-selected',
  submitForm: 'j2c:submit-form',
  showPanel: 'j2c:show-panel',
  openLog: 'j2c:open-log',
  openSweep: 'j2c:open-sweep'
} as const;
