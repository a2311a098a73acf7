/**
 * Behind JupyterHub, a single-user server stopped and started again (from the hub's control
 * panel or its API) has a new cookie secret, and it takes its cookie only from page
 * navigations: an open page gets 403 on every request until it navigates. `renewHubSession`
 * navigates a hidden frame to one of the server's pages, which runs the hub's OAuth again
 * (the hub's own login is still good) and leaves a fresh cookie for the whole page. One
 * renewal at a time, at most one every few seconds; outside a hub it does nothing.
 */
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

const MIN_INTERVAL_MS = 5000;
const TIMEOUT_MS = 15000;

let pending: Promise<void> | null = null;
let lastStarted = 0;

/** Whether this page is a JupyterHub single-user server's. */
export function underHub(): boolean {
  return PageConfig.getOption('hubUser') !== '';
}

/** Renew the page's login with the hub; resolves when the frame has loaded (or timed out). */
export function renewHubSession(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  if (!underHub()) {
    return Promise.resolve();
  }
  if (pending) {
    return pending;
  }
  if (Date.now() - lastStarted < MIN_INTERVAL_MS) {
    return Promise.resolve();
  }
  lastStarted = Date.now();
  pending = new Promise<void>(resolve => {
    const frame = document.createElement('iframe');
    frame.hidden = true;
    frame.setAttribute('aria-hidden', 'true');
    frame.tabIndex = -1;
    const done = () => {
      window.clearTimeout(timer);
      frame.remove();
      pending = null;
      resolve();
    };
    const timer = window.setTimeout(done, TIMEOUT_MS);
    frame.onload = done;
    // Any page of the server that needs a login does: the server sends the frame through the
    // hub's OAuth and back; a file that does not exist then ends in a small 404 page.
    frame.src = URLExt.join(settings.baseUrl, 'files', '.j2c-renew-session');
    document.body.appendChild(frame);
  });
  return pending;
}
