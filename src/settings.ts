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
}

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
  jobsPageSize: 200
};

/** The current settings; follows the setting registry when one is given. */
export class J2CSettings {
  get current(): IJ2CSettings {
    return this._current;
  }

  get changed(): ISignal<this, IJ2CSettings> {
    return this._changed;
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

  private _current: IJ2CSettings = DEFAULT_SETTINGS;
  private readonly _changed = new Signal<this, IJ2CSettings>(this);
}
