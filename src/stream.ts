/**
 * `JobEventStream`: follows one job's events over the websocket
 * (`/j2c/api/jobs/{id}/stream?after=N`) and reconnects by itself with the last `seq` it
 * handed on, with exponential backoff: nothing is lost and, because events at or below that
 * `seq` are dropped, nothing is handed on twice. While it waits to retry, `retryInMs` counts
 * down (read it as often as you like) and `retryChanged` says when a new wait or attempt begins.
 */
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { isTerminal } from './format';
import { renewHubSession } from './hubSession';
import { jobsApi } from './jobs';
import { Event } from './models';
import { J2CRequestError, wsUrl } from './request';

/** Where the connection stands, for the log panel's header. */
export type StreamState =
  'connecting' | 'open' | 'reconnecting' | 'ended' | 'gone';

export interface IStreamOptions {
  jobId: string;
  /** Handed every new event, in `seq` order, exactly once. */
  onEvent: (event: Event) => void;
  /** Resume after this seq (default 0: replay everything). */
  after?: number;
  settings?: ServerConnection.ISettings;
  /** First retry delay; doubled after each failed attempt up to `maxDelayMs`. */
  initialDelayMs?: number;
  maxDelayMs?: number;
}

export class JobEventStream implements IDisposable {
  constructor(options: IStreamOptions) {
    this._options = options;
    this._lastSeq = options.after ?? 0;
    this._settings = options.settings ?? ServerConnection.makeSettings();
    this._delay = options.initialDelayMs ?? 250;
  }

  /** The seq of the last event handed on. */
  get lastSeq(): number {
    return this._lastSeq;
  }

  get state(): StreamState {
    return this._state;
  }

  get stateChanged(): ISignal<this, StreamState> {
    return this._stateChanged;
  }

  /**
   * Milliseconds until the next reconnection attempt, counted down from now (0 while an
   * attempt is under way, or when connected).
   */
  get retryInMs(): number {
    return this._retryAt ? Math.max(0, this._retryAt - Date.now()) : 0;
  }

  /** Failed attempts since the connection was lost (0 once connected). */
  get attempts(): number {
    return this._attempts;
  }

  /** A new wait was scheduled or a new attempt started (the state may stay 'reconnecting'). */
  get retryChanged(): ISignal<this, void> {
    return this._retryChanged;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  start(): void {
    if (!this._socket && this._state !== 'ended' && !this._disposed) {
      this._connect();
    }
  }

  /** Close the socket at once and try again (e.g. when the network is back). */
  reconnect(): void {
    if (this._state === 'ended' || this._state === 'gone' || this._disposed) {
      return;
    }
    window.clearTimeout(this._timer);
    this._closeSocket();
    this._connect();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._timer);
    this._closeSocket();
    Signal.clearData(this);
  }

  private _connect(): void {
    this._retryAt = 0;
    this._setState(this._everOpened ? 'reconnecting' : 'connecting');
    this._retryChanged.emit();
    const settings = this._settings;
    let url = wsUrl(
      `jobs/${encodeURIComponent(this._options.jobId)}/stream?after=${this._lastSeq}`,
      settings
    );
    if (settings.appendToken && settings.token) {
      url += `&token=${encodeURIComponent(settings.token)}`;
    }
    const socket = new settings.WebSocket(url);
    this._socket = socket;
    let received = false;
    socket.onopen = () => {
      this._everOpened = true;
      this._attempts = 0;
      this._setState('open');
    };
    socket.onmessage = (message: MessageEvent) => {
      received = true;
      this._handle(message.data);
    };
    socket.onclose = () => {
      if (this._socket !== socket) {
        return;
      }
      this._socket = null;
      if (this._state !== 'ended') {
        void this._retry(received);
      }
    };
  }

  private _handle(data: unknown): void {
    if (typeof data !== 'string') {
      return;
    }
    const event = JSON.parse(data) as Event;
    if (event.seq <= this._lastSeq) {
      return; // already handed on before a reconnection
    }
    this._lastSeq = event.seq;
    this._delay = this._options.initialDelayMs ?? 250;
    this._options.onEvent(event);
    if (event.kind === 'status' && isTerminal(event.status)) {
      this._setState('ended');
      this._closeSocket();
    }
  }

  /** Back off, then reconnect; stop when the job no longer exists or has ended. */
  private async _retry(received: boolean): Promise<void> {
    if (!received) {
      try {
        const record = await jobsApi.get(this._options.jobId);
        if (
          isTerminal(record.status) &&
          (record.last_seq ?? 0) <= this._lastSeq
        ) {
          this._setState('ended');
          return;
        }
      } catch (error) {
        if (error instanceof J2CRequestError && error.status === 404) {
          this._setState('gone');
          return;
        }
        if (error instanceof J2CRequestError && error.status === 403) {
          // Behind JupyterHub: the server was started again and wants a new login.
          await renewHubSession(this._settings);
        }
      }
    }
    if (this._disposed) {
      return;
    }
    const max = this._options.maxDelayMs ?? 10000;
    const delay = Math.min(this._delay, max);
    this._delay = Math.min(delay * 2, max);
    // Jitter keeps many panels from reconnecting in lock-step after a server restart.
    const wait = Math.round(delay * (0.8 + Math.random() * 0.4));
    this._attempts += 1;
    this._retryAt = Date.now() + wait;
    this._setState('reconnecting');
    this._retryChanged.emit();
    this._timer = window.setTimeout(() => this._connect(), wait);
  }

  private _closeSocket(): void {
    const socket = this._socket;
    this._socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = null;
      socket.close();
    }
  }

  private _setState(state: StreamState): void {
    if (this._state !== state) {
      this._state = state;
      this._stateChanged.emit(state);
    }
  }

  private readonly _options: IStreamOptions;
  private readonly _settings: ServerConnection.ISettings;
  private _socket: WebSocket | null = null;
  private _lastSeq: number;
  private _delay: number;
  /** When the next attempt starts (ms since the epoch); 0 when none is waiting. */
  private _retryAt = 0;
  private _attempts = 0;
  private _timer = 0;
  private _everOpened = false;
  private _disposed = false;
  private _state: StreamState = 'connecting';
  private readonly _stateChanged = new Signal<this, StreamState>(this);
  private readonly _retryChanged = new Signal<this, void>(this);
}
