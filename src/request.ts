/**
 * The one way the extension talks to its server routes: URLs built from the server
 * settings (so it works behind JupyterHub's base URL), JSON in and out, and server
 * errors turned into `J2CRequestError`s that carry the field at fault.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** An error answered by the j2c server routes (or a network failure). */
export class J2CRequestError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code?: string,
    readonly field?: string,
    readonly hint?: string
  ) {
    super(message);
    this.name = 'J2CRequestError';
  }
}

/** The base of every j2c REST route. */
export function apiUrl(
  endPoint: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  return URLExt.join(settings.baseUrl, 'j2c', 'api', endPoint);
}

/**
 * A j2c route the browser fetches by itself (a download link): the `_xsrf` cookie goes along
 * as a parameter, as JupyterLab's own download URLs do, so the server accepts the request
 * even where the browser sends no `Referer`.
 */
export function downloadUrl(
  endPoint: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const url = apiUrl(endPoint, settings);
  const xsrf = /(?:^|;\s*)_xsrf=([^;]*)/.exec(document.cookie)?.[1];
  return xsrf ? `${url}?_xsrf=${xsrf}` : url;
}

/** A websocket URL under the j2c API, built from the server's `wsUrl`. */
export function wsUrl(
  endPoint: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  return URLExt.join(settings.wsUrl, 'j2c', 'api', endPoint);
}

/** Call a j2c REST route and parse its JSON answer. */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  return (await requestAPIWithHeaders<T>(endPoint, init, settings)).data;
}

/** A route's parsed JSON answer and its response headers (e.g. a page's `Link`). */
export interface IAPIAnswer<T> {
  data: T;
  headers: Headers;
}

/** `requestAPI`, keeping the response headers; errors are mapped the same way. */
export async function requestAPIWithHeaders<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IAPIAnswer<T>> {
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      apiUrl(endPoint, settings),
      init,
      settings
    );
  } catch (error) {
    throw new J2CRequestError(
      `The j2c server could not be reached: ${String(error)}`,
      0
    );
  }
  const text = await response.text();
  let data: unknown = undefined;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    const body = (typeof data === 'object' && data !== null ? data : {}) as {
      message?: string;
      error?: string;
      field?: string;
      hint?: string;
    };
    throw new J2CRequestError(
      body.message ?? `${response.status} ${response.statusText}`,
      response.status,
      body.error,
      body.field,
      body.hint
    );
  }
  return { data: data as T, headers: response.headers };
}

/** The `before` cursor of a `Link: <...>; rel="next"` header, or null when there is none. */
export function nextCursor(link: string | null): string | null {
  for (const part of (link ?? '').split(',')) {
    const match = /<([^>]*)>\s*;\s*rel="?next"?/.exec(part);
    if (match) {
      const query = match[1].split('?')[1] ?? '';
      return new URLSearchParams(query).get('before');
    }
  }
  return null;
}
