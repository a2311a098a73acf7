/**
 * The word when a job ends: the toast's text, and a browser notification while the Lab's tab
 * is in the background (the `notifyInBrowser` setting, the browser's permission granted once
 * through `askBrowserPermission`, called from a click).
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { formatDuration, jobSeconds } from './format';
import { JobRecord } from './models';

/** "Job train.py succeeded (exit code 0) in 42 s". */
export function endedMessage(
  record: JobRecord,
  trans: TranslationBundle
): string {
  const exit =
    record.exit_code !== null && record.exit_code !== undefined
      ? trans.__(' (exit code %1)', record.exit_code)
      : '';
  return trans.__(
    'Job %1 %2%3 in %4',
    record.name,
    record.status,
    exit,
    formatDuration(jobSeconds(record))
  );
}

/** What this browser allows: 'unsupported' where it has no notifications at all. */
export function browserPermission(): NotificationPermission | 'unsupported' {
  return typeof window.Notification === 'function'
    ? window.Notification.permission
    : 'unsupported';
}

/** Ask the browser once (from a user action: browsers ignore requests without one). */
export async function askBrowserPermission(): Promise<
  NotificationPermission | 'unsupported'
> {
  if (browserPermission() !== 'default') {
    return browserPermission();
  }
  return window.Notification.requestPermission();
}

/**
 * Tell the user through the browser, when the Lab's tab is hidden and they allowed it; a click
 * brings the tab back and runs `onClick`. Returns whether a notification was shown.
 */
export function notifyInBrowser(
  record: JobRecord,
  trans: TranslationBundle,
  onClick: () => void
): boolean {
  if (document.visibilityState !== 'hidden') {
    return false; // the toast is enough: the user is looking at the Lab
  }
  if (browserPermission() !== 'granted') {
    return false;
  }
  const notification = new window.Notification(
    trans.__('j2c: job %1 %2', record.name, record.status),
    { body: endedMessage(record, trans), tag: `j2c-${record.id}` }
  );
  notification.onclick = () => {
    window.focus();
    onClick();
    notification.close();
  };
  return true;
}
