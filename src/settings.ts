/** The user's settings (`schema/plugin.json`), typed, with their defaults. */
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ISignal, Signal } from '@lumino/signaling';

export interface IJ2CSettings {
  defaultImage: string;
  defaultGpus: number;
  defaultCpus: number | null;
  defaultMemory: string;
  memoryPresets: string[];
  followLogs: boolean;
  notifications: boolean;
  scrollback: number;
  /** The MLflow metric the jobs list shows per job; empty: none. */
  listMetric: string;
  /** Jobs the list loads per page (the newest page refreshes; older ones load on demand). */
  jobsPageSize: number;
  /** xterm's screen-reader mode in log panels; null: as JupyterLab's terminal setting. */
  screenReaderMode: boolean | null;
  /** A browser notification when a job ends while the Lab's tab is in the background. */
  notifyInBrowser: boolean;
}

/** JupyterLab's terminal settings, whose `screenReaderMode` the log panels follow by default. */
export const TERMINAL_PLUGIN = '@jupyterlab/terminal-extension:plugin';

export const DEFAULT_SETTINGS: IJ2CSettings = {
  defaultImage: '',
  defaultGpus: 0,
  defaultCpus: null,
  defaultMemory: '',
  memoryPresets: ['4Gi', '8Gi', '16Gi', '32Gi', '64Gi', '128Gi'],
  followLogs: true,
  notifications: true,
  scrollback: 50000,
  listMetric: '',
  jobsPageSize: 200,
  screenReaderMode: null,
  notifyInBrowser: false
};

/** The current settings; follows the setting registry when one is given. */
export class J2CSettings {
  get current(): IJ2CSettings {
    return this._current;
  }

  get changed(): ISignal<this, IJ2CSettings> {
    return this._changed;
  }

  /** Whether log panels use xterm's screen-reader mode: ours, else the terminal's, else off. */
  get screenReader(): boolean {
    return this._current.screenReaderMode ?? this._terminalScreenReader;
  }

  /** Read `settings` now and whenever the user changes them. */
  follow(settings: ISettingRegistry.ISettings): void {
    const read = (): void => {
      this._current = {
        ...DEFAULT_SETTINGS,
        ...(settings.composite as Partial<IJ2CSettings>)
      };
      this._changed.emit(this._current);
    };
    read();
    settings.changed.connect(read);
  }

  /** Follow JupyterLab's terminal `screenReaderMode` (the default of ours), where it exists. */
  followTerminal(registry: ISettingRegistry): void {
    registry.load(TERMINAL_PLUGIN).then(
      terminal => {
        const read = (): void => {
          this._terminalScreenReader =
            terminal.composite.screenReaderMode === true;
          this._changed.emit(this._current);
        };
        read();
        terminal.changed.connect(read);
      },
      () => undefined // no terminal extension: off unless our own setting says so
    );
  }

  private _current: IJ2CSettings = DEFAULT_SETTINGS;
  private _terminalScreenReader = false;
  private readonly _changed = new Signal<this, IJ2CSettings>(this);
}
