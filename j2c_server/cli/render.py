"""Turning a job's event stream into text: a stage board, status lines and the job's output.

:class:`StageBoard` is the model (what each stage is doing, from the events); the terminal
renderer draws it as progress bars redrawn in place on a TTY and as plain lines otherwise, and
the notebook magic draws the same board into a display handle.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import TextIO

from j2c_server.core.units import byte_size
from j2c_server.image.text import report_lines
from j2c_server.pack.models import ExcludedGroup, ExcludeRule, PackPlan
from j2c_server.wire.api import Event, EventKind, JobRecord, JobStatus, Stage, StageState

BAR_WIDTH = 24
# j2c-unpack's own lines in a job's log start so (see ``unpack/log.py``); they are j2c's status
# lines, not the job's output.
UNPACK_LINE_PREFIX = "j2c: "
# Statuses the stage lines already tell about; plain output skips their status lines.
PIPELINE_STATUSES = frozenset(
    {JobStatus.pending, JobStatus.packing, JobStatus.uploading, JobStatus.submitted}
)
REDRAW_INTERVAL_S = 0.1
_SIGNAL_EXIT_BASE = 128
# What the scan's notes show: paths per exclusion rule, and the largest files over the soft limit
# (the UI's preflight shows the same).
LEFT_OUT_SHOWN = 3
LARGEST_SHOWN = 5
_RULE_LABELS = {
    ExcludeRule.secret: "secrets",
    ExcludeRule.venv: "virtual environments",
    ExcludeRule.nested_venv: "virtual environments",
    ExcludeRule.default: "caches and tool folders",
    ExcludeRule.cache_dir: "caches and tool folders",
    ExcludeRule.gitignore: "ignored by .gitignore",
    ExcludeRule.j2cignore: "ignored by .j2cignore",
    ExcludeRule.exclude: "your excludes",
}


@dataclass
class StageView:
    stage: Stage
    state: StageState | None = None  # None: not started yet
    done: float | None = None
    total: float | None = None
    unit: str = ""
    text: str | None = None
    rate: float | None = None
    started_at: float | None = None
    seconds: float | None = None

    def line(self) -> str:
        label = f"{self.stage.value:<9}"
        if self.state == StageState.started:
            return f"{label} {self._progress()}".rstrip()
        state = self.state.value if self.state is not None else "waiting"
        return stage_line(self.stage.value, state, self.seconds, self.text)

    def _progress(self) -> str:
        if self.done is None:
            return "running…"
        if self.total:
            fraction = min(max(self.done / self.total, 0.0), 1.0)
            filled = round(fraction * BAR_WIDTH)
            bar = "█" * filled + "░" * (BAR_WIDTH - filled)
            amounts = f"{amount(self.done, self.unit)}/{amount(self.total, self.unit)}"
            return f"{bar} {fraction:4.0%} {amounts}{self._rate()}"
        return amount(self.done, self.unit) + self._rate()

    def _rate(self) -> str:
        return f"  {amount(self.rate, 'bytes')}/s" if self.rate else ""


def stage_line(stage: str, state: str, seconds: float | None, text: str | None) -> str:
    took = f" {seconds:.1f}s" if seconds is not None else ""
    detail = text or ""  # the stage's name is the label, never part of the text
    return f"{stage:<9} {state}{took}{'  ' + detail if detail else ''}"


def amount(value: float, unit: str) -> str:
    return byte_size(value) if unit == "bytes" else f"{value:g} {unit}".rstrip()


@dataclass
class StageBoard:
    """What each stage is doing and the job's status, folded from the event stream."""

    stages: dict[Stage, StageView] = field(default_factory=dict)
    status: JobStatus | None = None
    message: str | None = None
    error_code: str | None = None
    last_seq: int = 0
    attempt: str | None = None  # "attempt 2 of 4", once the job runs again (jobs/drive/attempts.py)

    def apply(self, event: Event) -> None:
        self.last_seq = max(self.last_seq, event.seq)
        boundary = event.data.get("attempt") if event.kind == EventKind.log else None
        if isinstance(boundary, dict) and boundary.get("next"):
            self.attempt = f"attempt {boundary['next']} of {boundary.get('of')}"
        if event.kind == EventKind.error:
            self.error_code = str(event.data.get("error", "internal"))
        elif event.kind == EventKind.status and event.status is not None:
            self.status = event.status
            self.message = event.text
        elif event.stage is not None and event.kind in (EventKind.stage, EventKind.progress):
            view = self.stages.setdefault(event.stage, StageView(event.stage))
            if event.kind == EventKind.progress:
                self._progress(view, event)
            elif event.state is not None:
                self._state(view, event)

    @staticmethod
    def _progress(view: StageView, event: Event) -> None:
        # The journal's meters report bytes and files moved, with totals where known.
        data = event.data
        view.state = StageState.started
        if data.get("bytes") or data.get("total_bytes"):
            view.done, view.total, view.unit = data.get("bytes"), data.get("total_bytes"), "bytes"
        elif "files" in data:
            view.done, view.total, view.unit = data.get("files"), data.get("total_files"), "files"
        rate = data.get("rate")
        view.rate = float(rate) if isinstance(rate, int | float) and view.unit == "bytes" else None

    @staticmethod
    def _state(view: StageView, event: Event) -> None:
        view.state = event.state or view.state
        if event.state == StageState.started:
            view.started_at = event.time
            return
        seconds = event.data.get("seconds")
        if isinstance(seconds, int | float):
            view.seconds = float(seconds)
        elif view.started_at is not None:
            view.seconds = event.time - view.started_at
        view.text = event.text

    def lines(self) -> list[str]:
        return [self.stages[stage].line() for stage in Stage if stage in self.stages]


def _group_line(group: ExcludedGroup) -> str:
    label = _RULE_LABELS.get(group.rule, group.rule.value.replace("_", " "))
    shown = ", ".join(group.paths[:LEFT_OUT_SHOWN])
    more = " …" if group.count > LEFT_OUT_SHOWN else ""
    layer = "" if group.layer.value == "code" else f" [{group.layer.value} layer]"
    return f"  {label}{layer} ({group.count}): {shown}{more}"


def plan_notes(plan: PackPlan) -> list[str]:
    """What the scan left out, by rule with its first paths (secrets first, then the largest
    groups), the largest files when the layers are over the soft limit, and what the target
    image lacks (``image/text.py``)."""
    lines: list[str] = report_lines(plan.image_report)
    if plan.excluded:
        total = sum(group.count for group in plan.excluded)
        lines.append(f"left out {total} path{'s' if total != 1 else ''} (ship one with --include):")
        groups = sorted(
            plan.excluded, key=lambda g: (g.rule != ExcludeRule.secret, -g.count, g.rule.value)
        )
        lines.extend(_group_line(group) for group in groups)
    if plan.total_bytes > plan.soft_limit_bytes:
        files = sorted(
            (
                (item.bytes, layer.role.value, item.path)
                for layer in plan.layers
                for item in layer.largest
            ),
            reverse=True,
        )[:LARGEST_SHOWN]
        lines.append(
            f"the layers hold {amount(plan.total_bytes, 'bytes')}, over the soft limit of "
            f"{amount(plan.soft_limit_bytes, 'bytes')}; the largest files:"
        )
        lines.extend(
            f"  {amount(size, 'bytes'):>9}  {role:<4}  {path}" for size, role, path in files
        )
    return lines


def scan_notes(event: Event) -> list[str]:
    """:func:`plan_notes` for the scan stage's "finished" event (which carries the plan)."""
    if (
        event.kind != EventKind.stage
        or event.stage != Stage.scan
        or event.state != StageState.finished
    ):
        return []
    raw = event.data.get("plan")
    return plan_notes(PackPlan.model_validate(raw)) if isinstance(raw, dict) else []


def is_stderr_line(event: Event) -> bool:
    """Whether a log line belongs on stderr: the job wrote it there, or j2c-unpack wrote it."""
    return event.stream == "stderr" or (event.text or "").startswith(UNPACK_LINE_PREFIX)


def rank_prefix(event: Event) -> str:
    """``[k] `` before a line of a multi-node job's rank k (its events carry the rank)."""
    rank = event.data.get("rank")
    return f"[{rank}] " if isinstance(rank, int) else ""


def exit_code_of(record: JobRecord) -> int:
    """The job's exit code as a shell sees it: signals as 128+N; failures without one as 1."""
    if record.exit_code is not None:
        code = record.exit_code
        return _SIGNAL_EXIT_BASE - code if code < 0 else min(code, 255)
    return 0 if record.status == JobStatus.succeeded else 1


def status_line(job_id: str, event: Event) -> str:
    status = event.status.value if event.status else "?"
    exit_code = event.data.get("exit_code")
    detail = f" (exit code {exit_code})" if exit_code is not None else ""
    message = f": {event.text}" if event.text else ""
    return f"j2c: job {job_id} {status}{detail}{message}"


class TerminalRenderer:
    """Job output to ``out``/``err`` as the job wrote it; j2c's own lines to ``err``.

    On a TTY the stage board is redrawn in place until the job's output starts, then it stays
    put and status changes follow as lines.
    """

    def __init__(
        self, job_id: str, *, tty: bool, out: TextIO, err: TextIO, logs_to_err: bool = False
    ) -> None:
        self.job_id = job_id
        self.tty = tty
        self.out = out
        self.err = err
        self.logs_to_err = logs_to_err
        self.board = StageBoard()
        self._drawn = 0
        self._live = tty
        self._last_draw = 0.0

    def handle(self, event: Event) -> None:
        self.board.apply(event)
        if event.kind == EventKind.log:
            self._freeze()
            stream = self.err if self.logs_to_err or is_stderr_line(event) else self.out
            stream.write(f"{rank_prefix(event)}{event.text or ''}\n")
            stream.flush()
        elif event.kind == EventKind.error:
            self._freeze()
            self._say(f"j2c: error: {event.text}")
        elif event.kind == EventKind.status:
            if event.terminal:
                self._freeze()
                self._say(status_line(self.job_id, event))
            elif self._live:
                self._draw(force=True)
            elif event.status not in PIPELINE_STATUSES:
                self._say(status_line(self.job_id, event))
        elif event.kind == EventKind.stage:
            notes = [f"j2c: {line}" for line in scan_notes(event)]
            if self._live:
                self._draw(force=True, above=notes)
            elif event.state not in (None, StageState.started) and event.stage is not None:
                self._say(f"j2c: {self.board.stages[event.stage].line()}")
                for line in notes:
                    self._say(line)
        elif event.kind == EventKind.progress and self._live:
            self._draw(force=False)
        elif event.kind == EventKind.result and event.data.get("output_uri"):
            self._say(f"j2c: outputs: {event.data['output_uri']}")

    def close(self) -> None:
        self._freeze()

    def _say(self, line: str) -> None:
        self.err.write(line + "\n")
        self.err.flush()

    def _freeze(self) -> None:
        if self._live:
            self._draw(force=True)
            self._live = False

    def _draw(self, *, force: bool, above: list[str] | None = None) -> None:
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
