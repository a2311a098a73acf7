/**
 * `LogView`: a job's output in xterm.js, so ANSI colours and carriage-return progress bars
 * (tqdm) render as in a terminal, drawn with WebGL (a canvas where WebGL is missing, as in
 * JupyterLab's terminal). Lines are batched and written once per animation frame, so a flood of
 * lines never makes a long task; the scrollback is bounded. In screen-reader mode xterm keeps
 * an accessibility tree of the rows in view; the panel's own live region (`announcer.ts`) is
 * the one voice for new output, so xterm's assertive live region is silenced.
 */
import { Message } from '@lumino/messaging';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import { CanvasAddon } from '@xterm/addon-canvas';
import { FitAddon } from '@xterm/addon-fit';
import { WebglAddon } from '@xterm/addon-webgl';
import { SearchAddon } from '@xterm/addon-search';
import { ITheme, Terminal } from '@xterm/xterm';

/** ANSI colours readable on a light background (xterm's defaults suit dark ones). */
const LIGHT_ANSI: ITheme = {
  black: '#000000',
  red: '#c4291f',
  green: '#2c7a18',
  yellow: '#8a6500',
  blue: '#1f55c4',
  magenta: '#a0309e',
  cyan: '#0f7b86',
  white: '#7a7a7a',
  brightBlack: '#555555',
  brightRed: '#e0483e',
  brightGreen: '#3a9a25',
  brightYellow: '#a67c00',
  brightBlue: '#3a6fe0',
  brightMagenta: '#c03dbd',
  brightCyan: '#159aa8',
  brightWhite: '#9e9e9e'
};

/**
 * The bar before each stderr line (drawn red by the panel): a shape as well as a colour, so
 * the mark reads without colour too. Copying leaves it out.
 */
export const STDERR_MARK = '▍';

/** What `text()` takes off the start of a line: the stderr mark and its space. */
const MARK_PREFIX = `${STDERR_MARK} `;

/** While the page is hidden, animation frames stop: flush on a timer instead. */
const HIDDEN_FLUSH_MS = 250;

function cssVar(name: string, fallback: string): string {
  const value = getComputedStyle(document.body).getPropertyValue(name).trim();
  return value || fallback;
}

/** The terminal's colours and font, from the current JupyterLab theme. */
function currentTheme(): {
  theme: ITheme;
  fontFamily: string;
  fontSize: number;
} {
  const light = document.body.dataset.jpThemeLight !== 'false';
  const theme: ITheme = {
    ...(light ? LIGHT_ANSI : {}),
    background: cssVar('--jp-layout-color0', light ? '#ffffff' : '#111111'),
    foreground: cssVar(
      '--jp-content-font-color0',
      light ? '#000000' : '#ffffff'
    ),
    cursor: 'transparent',
    cursorAccent: 'transparent',
    selectionBackground: light
      ? 'rgba(0, 100, 200, 0.25)'
      : 'rgba(120, 170, 255, 0.35)'
  };
  const fontSize = parseInt(cssVar('--jp-code-font-size', '13px'), 10) || 13;
  return {
    theme,
    fontFamily: cssVar('--jp-code-font-family', 'monospace'),
    fontSize
  };
}

export class LogView extends Widget {
  constructor(options: LogView.IOptions) {
    super();
    this.addClass('j2c-LogView');
    const look = currentTheme();
    this._term = new Terminal({
      scrollback: options.scrollback,
      convertEol: true,
      disableStdin: true,
      cursorBlink: false,
      cursorStyle: 'bar',
      cursorInactiveStyle: 'none',
      fontFamily: look.fontFamily,
      fontSize: look.fontSize,
      theme: look.theme,
      screenReaderMode: options.screenReader ?? false
    });
    this._term.loadAddon(this._fit);
    this._term.loadAddon(this._search);
    this._follow = options.follow;
    this._label = options.label ?? 'Job output';
    this._term.onScroll(() => this._scrolled());
    // Keyboard users scroll the output as a pager (nobody types into it); captured before xterm
    // turns the keys into input it then drops.
    this.node.addEventListener('keydown', event => this._pagerKey(event), true);
  }

  /** How many lines were handed to the view (written or waiting for the next frame). */
  get lineCount(): number {
    return this._lines;
  }

  /** Whether the view keeps the newest line in sight. */
  get following(): boolean {
    return this._follow;
  }

  get followingChanged(): ISignal<this, boolean> {
    return this._followingChanged;
  }

  /** The underlying terminal (for tests and benchmarks that inspect what is shown). */
  get terminal(): Terminal {
    return this._term;
  }

  /** Add one line (it may hold ANSI sequences and `\r`); shown at the next frame. */
  appendLine(text: string): void {
    this._pending.push(text, '\n');
    this._lines += 1;
    this._schedule();
  }

  /**
   * Forget every line shown or waiting, before the lines are written again (filtered). The
   * reset goes through the same write queue, after what was already handed to the terminal.
   */
  clear(): void {
    this._pending = ['\x1bc\x1b[?25l'];
    this._lines = 0;
    this._placed = false;
    this._schedule();
  }

  /** Follow the newest line, or stay where the view is (pause). */
  setFollowing(follow: boolean): void {
    if (follow) {
      this._term.scrollToBottom();
    } else if (this._atBottom()) {
      // xterm follows on its own while its viewport is at the bottom: step off it.
      this._term.scrollLines(-1);
    }
    this._setFollow(follow);
  }

  /** Select the next (or previous) match of `text`; false when there is none. */
  find(text: string, backwards = false): boolean {
    if (!text) {
      this._search.clearDecorations();
      this._term.clearSelection();
      return false;
    }
    const options = { caseSensitive: false, incremental: !backwards };
    const found = backwards
      ? this._search.findPrevious(text, options)
      : this._search.findNext(text, options);
    if (found) {
      this._setFollow(this._atBottom());
    }
    return found;
  }

  /** The selection, or every line the view still holds. */
  text(): string {
    if (this._term.hasSelection()) {
      return this._term.getSelection();
    }
    const buffer = this._term.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buffer.length; i++) {
      const line = buffer.getLine(i);
      if (line && !line.isWrapped) {
        lines.push(line.translateToString(true));
      } else if (line && lines.length) {
        lines[lines.length - 1] += line.translateToString(true);
      }
    }
    while (lines.length && !lines[lines.length - 1]) {
      lines.pop();
    }
    return lines
      .map(line =>
        line.startsWith(MARK_PREFIX) ? line.slice(MARK_PREFIX.length) : line
      )
      .join('\n');
  }

  /** Re-read the theme's colours and font (after a theme change). */
  applyTheme(): void {
    const look = currentTheme();
    this._term.options.theme = look.theme;
    this._term.options.fontFamily = look.fontFamily;
    this._term.options.fontSize = look.fontSize;
    this._fitSoon();
  }

  setScrollback(lines: number): void {
    this._term.options.scrollback = lines;
  }

  /** Whether the rows in view are exposed to screen readers (xterm's screen-reader mode). */
  get screenReader(): boolean {
    return this._term.options.screenReaderMode === true;
  }

  setScreenReaderMode(on: boolean): void {
    if (this.screenReader !== on) {
      this._term.options.screenReaderMode = on;
      this._quietXtermLiveRegion();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    cancelAnimationFrame(this._frame);
    window.clearTimeout(this._timer);
    this._term.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (!this._opened) {
      this._opened = true;
      this._term.open(this.node);
      this._loadRenderer();
      this._term.write('\x1b[?25l'); // no cursor: nobody types here
      this._labelTerminal();
      this._quietXtermLiveRegion();
    }
    this._fitSoon();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._fitSoon();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._fitSoon();
  }

  /**
   * WebGL draws off the main thread's back; where it is missing (or its context is lost),
   * a canvas, as JupyterLab's terminal does.
   */
  private _loadRenderer(): void {
    try {
      const webgl = new WebglAddon();
      webgl.onContextLoss(() => {
        webgl.dispose();
        this._term.loadAddon(new CanvasAddon());
      });
      this._term.loadAddon(webgl);
    } catch {
      this._term.loadAddon(new CanvasAddon());
    }
  }

  /** Names for xterm's focusable parts: its input stands for the whole output here. */
  private _labelTerminal(): void {
    const input = this._term.textarea;
    if (input) {
      input.setAttribute('aria-label', this._label);
      input.setAttribute('aria-readonly', 'true');
    }
  }

  /**
   * xterm reads every row written through its own assertive live region in screen-reader
   * mode; the panel's polite, capped region already announces new output.
   */
  private _quietXtermLiveRegion(): void {
    this._term.element
      ?.querySelectorAll('.live-region')
      .forEach(region => region.setAttribute('aria-live', 'off'));
  }

  /** PageUp/PageDown, arrows, Home/End scroll the output (and Home/PageUp pause following). */
  private _pagerKey(event: KeyboardEvent): void {
    const term = this._term;
    const moves: { [key: string]: () => void } = {
      ArrowUp: () => term.scrollLines(-1),
      ArrowDown: () => term.scrollLines(1),
      PageUp: () => term.scrollPages(-1),
      PageDown: () => term.scrollPages(1),
      Home: () => term.scrollToTop(),
      End: () => term.scrollToBottom()
    };
    const move = moves[event.key];
    if (move && !event.altKey && !event.ctrlKey && !event.metaKey) {
      event.preventDefault();
      event.stopPropagation();
      move();
    }
  }

  private _schedule(): void {
    if (this._frame || this._timer) {
      return;
    }
    if (document.hidden) {
      this._timer = window.setTimeout(() => this._flush(), HIDDEN_FLUSH_MS);
    } else {
      this._frame = requestAnimationFrame(() => this._flush());
    }
  }

  /** Write everything that arrived since the last frame in one call. */
  private _flush(): void {
    this._frame = 0;
    this._timer = 0;
    if (!this._pending.length || this.isDisposed) {
      return;
    }
    const data = this._pending.join('');
    this._pending = [];
    this._term.write(data, () => {
      if (this.isDisposed) {
        return;
      }
      if (this._follow) {
        this._term.scrollToBottom();
      } else if (!this._placed) {
        this._term.scrollToTop(); // not following: open at the first line
      }
      this._placed = true;
    });
  }

  private _fitSoon(): void {
    if (this._fitFrame || !this._opened) {
      return;
    }
    this._fitFrame = requestAnimationFrame(() => {
      this._fitFrame = 0;
      if (this.isVisible && this.node.clientWidth > 0) {
        this._fit.fit();
      }
    });
  }

  private _scrolled(): void {
    this._setFollow(this._atBottom());
  }

  private _atBottom(): boolean {
    const buffer = this._term.buffer.active;
    return buffer.viewportY >= buffer.baseY;
  }

  private _setFollow(follow: boolean): void {
    if (this._follow !== follow) {
      this._follow = follow;
      this._followingChanged.emit(follow);
    }
  }

  private readonly _term: Terminal;
  private readonly _fit = new FitAddon();
  private readonly _search = new SearchAddon();
  private _pending: string[] = [];
  private _lines = 0;
  private _frame = 0;
  private _timer = 0;
  private _fitFrame = 0;
  private _opened = false;
  private _placed = false;
  private _follow: boolean;
  private readonly _label: string;
  private readonly _followingChanged = new Signal<this, boolean>(this);
}

export namespace LogView {
  export interface IOptions {
    scrollback: number;
    follow: boolean;
    /** xterm's screen-reader mode (the rows in view in the accessibility tree). */
    screenReader?: boolean;
    /** The accessible name of the output (its focusable input). */
    label?: string;
  }
}
