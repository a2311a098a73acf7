"""A job's events in a terminal: the job's lines on stdout (its stderr's on stderr), j2c's on
stderr.

By default j2c says a few lines (summary.py): the job sent, its status changes, j2c's warnings
and errors, how it ended. On a TTY one progress line is rewritten in place meanwhile (the
running stage's bar, then the status and j2c's phase in the job) until the job's output starts;
piped, only plain lines, no escape codes. ``verbose`` is j2c's diary: the stage board, every
line of j2c's in the job (``j2c: <phase>: ...``), every status.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from j2c_server.cli.render import (
    PIPELINE_STATUSES,
    REDRAW_INTERVAL_S,
    StageBoard,
    is_stderr_line,
    log_text,
    scan_notes,
    status_line,
)
from j2c_server.cli.summary import end_lines, progress_text, sent_line, shown_by_default
from j2c_server.wire.api import Event, EventKind, Stage, StageState


class TerminalRenderer:
    """Job output to ``out``/``err`` as the job wrote it; j2c's own lines to ``err``."""

    def __init__(
        self,
        job_id: str,
        *,
        tty: bool,
        out: TextIO,
        err: TextIO,
        logs_to_err: bool = False,
        verbose: bool = False,
        failure_told: bool = False,
    ) -> None:
        self.job_id = job_id
        self.tty = tty
        self.out = out
        self.err = err
        self.logs_to_err = logs_to_err
        self.verbose = verbose
        self.failure_told = failure_told  # a failed job's reason was shown at the top
        self.board = StageBoard()
        self.output_uri: str | None = None
        self.phase: str | None = None  # j2c's latest phase in the job (downloading, ...)
        self._drawn = 0  # lines of the board (verbose) or the live line drawn below the rest
        self._live = tty
        self._last_draw = 0.0

    def handle(self, event: Event) -> None:
        self.board.apply(event)
        if event.kind == EventKind.result and event.data.get("output_uri"):
            self.output_uri = str(event.data["output_uri"])
        if self.verbose:
            self._diary(event)
        else:
            self._summary(event)

    def close(self) -> None:
        self._freeze()

    # ------------------------------------------------------------------ by default

    def _summary(self, event: Event) -> None:
        if event.kind == EventKind.log:
            if shown_by_default(event):
                self._line(event)
            else:  # a few a job: each shows
                self.phase = event.phase
                self._draw_live(force=True)
        elif event.kind == EventKind.status:
            if event.terminal:
                self._freeze()
                told = self.failure_told
                for line in end_lines(self.job_id, event, output_uri=self.output_uri, told=told):
                    self._say(line)
            elif event.status in PIPELINE_STATUSES or self._live:
                self._draw_live(force=True)
            else:
                self._say(status_line(self.job_id, event))
        elif event.kind == EventKind.stage:
            for note in scan_notes(event):
                self._say(f"j2c: {note}")
            if event.stage == Stage.submit and event.state in (
                StageState.finished,
                StageState.reused,
            ):
                self._say(sent_line(self.job_id, self.board))
            self._draw_live(force=True)
        elif event.kind == EventKind.progress:
            self._draw_live(force=False)
        # An error event's words come back in the failed status's reason (end_lines).

    def _draw_live(self, *, force: bool) -> None:
        """Rewrite the one progress line in place (a TTY, until the job's output starts)."""
        if not self._live:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_INTERVAL_S:
            return
        self._last_draw = now
        width = shutil.get_terminal_size().columns - 1
        text = f"j2c: job {self.job_id} {progress_text(self.board, self.phase)}"[:width]
        self.err.write(f"\r\x1b[2K{text}")
        self.err.flush()
        self._drawn = 1

    def _clear_live(self) -> None:
        if self._drawn and not self.verbose:
            self.err.write("\r\x1b[2K")
            self.err.flush()
            self._drawn = 0

    # ------------------------------------------------------------------ --verbose

    def _diary(self, event: Event) -> None:
        if event.kind == EventKind.log:
            self._line(event)
        elif event.kind == EventKind.error:
            self._freeze()
            self._say(f"j2c: error: {event.text}")
        elif event.kind == EventKind.status:
            if event.terminal:
                self._freeze()
                told = self.failure_told
                for line in end_lines(self.job_id, event, output_uri=None, told=told):
                    self._say(line)
            elif self._live:
                self._draw_board(force=True)
            elif event.status not in PIPELINE_STATUSES:
                self._say(status_line(self.job_id, event))
        elif event.kind == EventKind.stage:
            notes = [f"j2c: {line}" for line in scan_notes(event)]
            if self._live:
                self._draw_board(force=True, above=notes)
            elif event.state not in (None, StageState.started) and event.stage is not None:
                self._say(f"j2c: {self.board.stages[event.stage].line()}")
                for line in notes:
                    self._say(line)
        elif event.kind == EventKind.progress and self._live:
            self._draw_board(force=False)
        elif event.kind == EventKind.result and event.data.get("output_uri"):
            self._say(f"j2c: outputs: {event.data['output_uri']}")

    def _draw_board(self, *, force: bool, above: list[str] | None = None) -> None:
        """Redraw the board in place; ``above`` are lines that stay put above it."""
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_INTERVAL_S:
            return
        self._last_draw = now
        if above:
            # Overwrite the old board with the lines, then draw the board anew below them.
            text = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.err.write(text + "".join(f"\x1b[2K{line}\n" for line in above))
            self._drawn = 0
        lines = self.board.lines()
        if self.board.status is not None:
            lines.append(f"status    {self.board.status.value}")
        # A wrapped line would throw off the cursor movement below: cut to the terminal's width.
        width = shutil.get_terminal_size().columns - 3
        lines = [line[:width] for line in lines]
        # Move up over what was drawn last time, then rewrite each line in full.
        text = f"\x1b[{self._drawn}F" if self._drawn else ""
        text += "".join(f"\x1b[2K  {line}\n" for line in lines)
        self.err.write(text)
        self.err.flush()
        self._drawn = len(lines)

    # ------------------------------------------------------------------ both

    def _line(self, event: Event) -> None:
        """One log line: the job's where it wrote it, j2c's on ``err``."""
        self._freeze()
        stream = self.err if self.logs_to_err or is_stderr_line(event) else self.out
        stream.write(log_text(event) + "\n")
        stream.flush()

    def _say(self, line: str) -> None:
        """One of j2c's lines; on a TTY above the live line, which is drawn again below it."""
        self._clear_live()
        self.err.write(line + "\n")
        self.err.flush()
        if self._live and not self.verbose:
            self._draw_live(force=True)

    def _freeze(self) -> None:
        """The job's output starts (or it ended): the board stays put (verbose), the live line
        goes; plain lines from here on."""
        if not self._live:
            return
        if self.verbose:
            self._draw_board(force=True)
        else:
            self._clear_live()
        self._live = False
