/**
 * The virtual environment a notebook's running kernel uses, asked of the kernel itself with a
 * silent user expression (no output, no history): its absolute prefix for the server's
 * defaults route, or (for an older server) a path relative to the server root.
 */
import { PathExt } from '@jupyterlab/coreutils';
import { Kernel } from '@jupyterlab/services';

/** How long a busy kernel may keep the form waiting. */
const KERNEL_TIMEOUT_MS = 2000;

/** `[sys.prefix, sys.base_prefix, os.getcwd()]` as a JSON string. */
const EXPRESSION =
  "__import__('json').dumps([__import__('sys').prefix, " +
  "__import__('sys').base_prefix, __import__('os').getcwd()])";

/**
 * The JSON text inside the Python repr of a str. `json.dumps` writes ASCII only, so the repr
 * escapes nothing but backslashes and its own quote; anything else is unexpected (null).
 */
function unrepr(text: string): string | null {
  const quote = text[0];
  if (
    text.length < 2 ||
    (quote !== "'" && quote !== '"') ||
    !text.endsWith(quote)
  ) {
    return null;
  }
  let bad = false;
  const body = text.slice(1, -1).replace(/\\(.?)/g, (_, next: string) => {
    if (next === '\\' || next === quote) {
      return next;
    }
    bad = true;
    return '';
  });
  return bad ? null : body;
}

function parseReply(value: unknown): string[] | null {
  const expression = value as
    { status?: string; data?: { [mime: string]: unknown } } | undefined;
  const plain = expression?.data?.['text/plain'];
  if (expression?.status !== 'ok' || typeof plain !== 'string') {
    return null;
  }
  const json = unrepr(plain);
  if (json === null) {
    return null;
  }
  try {
    const parsed: unknown = JSON.parse(json);
    return Array.isArray(parsed) &&
      parsed.length === 3 &&
      parsed.every(item => typeof item === 'string' && item.startsWith('/'))
      ? (parsed as string[])
      : null;
  } catch {
    return null;
  }
}

function trimSlash(path: string): string {
  return path.length > 1 ? path.replace(/\/+$/, '') : path;
}

/** `[sys.prefix, sys.base_prefix, os.getcwd()]` of `kernel`, or null when it does not answer. */
async function askKernel(
  kernel: Kernel.IKernelConnection
): Promise<string[] | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const future = kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { j2c: EXPRESSION }
    });
    const timeout = new Promise<null>(resolve => {
      timer = setTimeout(() => resolve(null), KERNEL_TIMEOUT_MS);
    });
    const reply = await Promise.race([future.done, timeout]);
    if (reply === null) {
      future.dispose();
      return null;
    }
    const content = reply.content as { user_expressions?: { j2c?: unknown } };
    const answer = parseReply(content.user_expressions?.j2c);
    return answer === null ? null : answer.map(trimSlash);
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The absolute `sys.prefix` of `kernel`, for the server to judge with its one rule (a venv
 * inside the root, or not); null when the kernel does not answer in time.
 */
export async function kernelPrefix(
  kernel: Kernel.IKernelConnection
): Promise<string | null> {
  const answer = await askKernel(kernel);
  return answer === null ? null : answer[0];
}

/**
 * The venv of `kernel`, running the notebook at `path` (relative to the server root), relative
 * to the server root; null when it is no venv, lies outside the root, or the kernel does not
 * answer in time. Only for a server without the defaults route.
 */
export async function kernelVenv(
  kernel: Kernel.IKernelConnection,
  path: string
): Promise<string | null> {
  const answer = await askKernel(kernel);
  if (answer === null) {
    return null;
  }
  const [prefix, basePrefix, cwd] = answer;
  if (prefix === basePrefix) {
    return null;
  }
  // The kernel starts in the notebook's folder: the root is its cwd less that folder.
  const dir = PathExt.dirname(path);
  let root = cwd;
  if (dir !== '') {
    if (!cwd.endsWith(`/${dir}`)) {
      return null;
    }
    root = cwd.slice(0, -(dir.length + 1)) || '/';
  }
  const base = root === '/' ? '/' : `${root}/`;
  return prefix.startsWith(base) && prefix.length > base.length
    ? prefix.slice(base.length)
    : null;
}
