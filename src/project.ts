/**
 * Where a file's project is, found through the contents API: the file's folder or its
 * nearest ancestor holding `.git` or `pyproject.toml`, the entry point relative to it, and
 * the project's virtual environment. Only for a server without the defaults route (which
 * applies the server's own rule): it never proposes a venv it could not see.
 */
import { PathExt } from '@jupyterlab/coreutils';
import { Contents } from '@jupyterlab/services';

/** Files that mark a project's root folder. */
const PROJECT_MARKERS = ['.git', 'pyproject.toml'];
/** Folder names a project's venv usually has, in order of preference. */
const VENV_NAMES = ['.venv', 'venv'];

export interface IProjectGuess {
  /** The project folder, relative to the server root ('' is the root itself). */
  project: string;
  /** The entry point relative to the project. */
  entry: string;
  /**
   * The venv relative to the server root, or '' for none. The contents API hides dot-folders
   * unless `ContentsManager.allow_hidden` is set, so a `.venv` it cannot see is not proposed.
   */
  venv: string;
}

async function listNames(
  contents: Contents.IManager,
  dir: string
): Promise<Set<string> | null> {
  try {
    const model = await contents.get(dir, { content: true });
    const items = Array.isArray(model.content)
      ? (model.content as Contents.IModel[])
      : [];
    return new Set(items.map(item => item.name));
  } catch {
    return null;
  }
}

async function exists(
  contents: Contents.IManager,
  path: string
): Promise<boolean> {
  try {
    await contents.get(path, { content: false });
    return true;
  } catch {
    return false;
  }
}

/** The project of `path` (a file relative to the server root). */
export async function guessProject(
  contents: Contents.IManager,
  path: string
): Promise<IProjectGuess> {
  const start = PathExt.dirname(path);
  let project = start;
  let names: Set<string> | null = null;
  for (let dir = start; ; dir = PathExt.dirname(dir)) {
    const listed = await listNames(contents, dir);
    if (listed === null) {
      break;
    }
    if (dir === start) {
      names = listed;
    }
    if (PROJECT_MARKERS.some(marker => listed.has(marker))) {
      project = dir;
      names = listed;
      break;
    }
    if (dir === '') {
      break;
    }
  }
  const entry = PathExt.relative(
    project === '' ? '/' : `/${project}`,
    `/${path}`
  );
  for (const name of VENV_NAMES) {
    const venv = PathExt.join(project, name);
    if (
      names?.has(name) &&
      (await exists(contents, PathExt.join(venv, 'pyvenv.cfg')))
    ) {
      return { project, entry, venv };
    }
  }
  return { project, entry, venv: '' };
}
