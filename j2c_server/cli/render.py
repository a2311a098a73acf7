"""Turning a job's event stream into text: a stage board, status lines and the job's lines.

:class:`StageBoard` is the model (what each stage is doing, from the events); the terminal
renderer (terminal.py) draws it as progress redrawn in place on a TTY and as plain lines
otherwise, and the notebook magic draws it into a display handle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from j2c_server.core.units import byte_size
from j2c_server.image.text import report_lines
from j2c_server.pack.models import ExcludedGroup, ExcludeRule, PackPlan
from j2c_server.wire.api import Event, EventKind, JobRecord, JobStatus, Stage, StageState
from j2c_server.wire.event_frames import diary_text

BAR_WIDTH = 24
# Statuses the stage lines already tell about; plain output skips their status lines.
PIPELINE_STATUSES = frozenset(
    {JobStatus.pending, JobStatus.packing, JobStatus.uploading, JobStatus.submitted}
)
REDRAW_INTERVAL_S = 0.1
# Warnings of the plan said with the scan's notes: a job that would fail where it runs.
SAID_WARNINGS = frozenset({"notebook_runner"})
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
    data: dict[str, Any] = field(default_factory=dict)  # its last stage event's

    def line(self) -> str:
        label = f"{self.stage.value:<9}"
        if self.state == StageState.started:
            return f"{label} {self._progress()}".rstrip()
        state = self.state.value if self.state is not None else "waiting"
        return stage_line(self.stage.value, state, self.seconds, self.text)

    def progress(self) -> str:
        """While it runs: its bar and amounts (or "running…"), after its name."""
        return f"{self.stage.value} {self._progress()}".rstrip()

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
        view.data = event.data
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
    """What the target image lacks (``image/text.py``) and what the entry point's runner lacks
    (image/runner.py), what the scan left out, by rule with its first paths (secrets first,
    then the largest groups), and the largest files when the layers are over the soft limit."""
    lines: list[str] = report_lines(plan.image_report)
    lines += [warning.message for warning in plan.warnings if warning.code in SAID_WARNINGS]
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
    """Whether a log line belongs on stderr: the job wrote it there, or it is j2c's."""
    return event.stream == "stderr" or event.is_j2c_line


def log_text(event: Event) -> str:
    """A log line as the diary shows it (j2c's with its phase), after its rank."""
    return rank_prefix(event) + diary_text(event.model_dump())


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
