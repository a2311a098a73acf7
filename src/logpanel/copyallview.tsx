/**
 * The results view's "Copy all" action: its button and what the copy did — the folder, every
 * file copied (by its path in the folder) and every file not copied with the server's reason.
 * The state is `CopyAllModel`'s; this only renders it.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { CopyAllModel } from './copyall';

/** `path` (relative to the server's root) as a name inside `folder`. */
function inFolder(path: string, folder: string): string {
  return path.startsWith(`${folder}/`) ? path.slice(folder.length + 1) : path;
}

function Outcome(props: {
  model: CopyAllModel;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { model, trans } = props;
  if (model.state === 'failed') {
    return (
      <p className="j2c-CopyAll-error" role="alert" data-j2c="copy-all-error">
        {trans.__('Copy all failed: %1', model.error ?? '')}
      </p>
    );
  }
  const result = model.result;
  if (model.state !== 'done' || !result) {
    return null;
  }
  const copied = result.copied ?? [];
  const failed = result.failed ?? [];
  return (
    <div className="j2c-CopyAll-outcome" data-j2c="copy-all-outcome">
      <p role="status">
        {trans._n(
          'Copied %1 file to %2',
          'Copied %1 files to %2',
          copied.length,
          result.folder
        )}
        {failed.length
          ? trans._n(', %1 not copied', ', %1 not copied', failed.length)
          : ''}
      </p>
      {copied.length ? (
        <ul aria-label={trans.__('Copied')} data-j2c="copied">
          {copied.map(path => (
            <li key={path}>{inFolder(path, result.folder)}</li>
          ))}
        </ul>
      ) : null}
      {failed.length ? (
        <ul aria-label={trans.__('Not copied')} data-j2c="not-copied">
          {failed.map(item => (
            <li key={item.name}>
              <span className="j2c-CopyAll-name">{item.name}</span>
              {`: ${item.error}`}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

export function CopyAll(props: {
  model: CopyAllModel;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, trans } = props;
  const copying = model.state === 'copying';
  return (
    <div className="j2c-CopyAll">
      <button
        type="button"
        className="jp-mod-styled j2c-CopyAll-button"
        disabled={copying}
        title={trans.__(
          "Copy every artifact into the project's j2c-outputs folder, keeping its path"
        )}
        onClick={() => void model.run()}
      >
        {copying ? trans.__('Copying…') : trans.__('Copy all to project')}
      </button>
      <Outcome model={model} trans={trans} />
    </div>
  );
}
