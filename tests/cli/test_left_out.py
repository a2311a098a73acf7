"""The CLI says what the scan left out (by rule, first paths) and, over the soft limit, which
files are the largest: not just "6 paths left out"."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from j2c_server.cli.render import plan_notes
from j2c_server.cli.terminal import TerminalRenderer
from j2c_server.pack.models import PackPlan
from j2c_server.wire.api import Event, EventKind, Stage

MB = 1_000_000


def plan(**fields: Any) -> PackPlan:
    base: dict[str, Any] = {
        "layers": [
            {
                "role": "code",
                "source_path": "/p",
                "files": 3,
                "entries": 4,
                "bytes": 30 * MB,
                "largest": [
                    {"path": "data/big.bin", "bytes": 25 * MB},
                    {"path": "train.py", "bytes": 1_000},
                ],
            }
        ],
        "entry": {"kind": "script", "target": "train.py"},
        "venv": None,
        "excluded": [
            {
                "layer": "code",
                "rule": ".gitignore",
                "count": 4,
                "paths": ["a.log", "b.log", "c/", "d/"],
            },
            {"layer": "code", "rule": "secret", "count": 1, "paths": [".env"]},
        ],
        "warnings": [],
        "total_bytes": 30 * MB,
        "soft_limit_bytes": 10 * MB,
        "hard_limit_bytes": 100 * MB,
    }
    return PackPlan.model_validate({**base, **fields})


def test_notes_list_each_rule_with_its_first_paths_secrets_first() -> None:
    notes = plan_notes(plan(total_bytes=1, soft_limit_bytes=10))
    assert notes == [
        "left out 5 paths (ship one with --include):",
        "  secrets (1): .env",
        "  ignored by .gitignore (4): a.log, b.log, c/ …",
    ]


def test_notes_show_the_largest_files_over_the_soft_limit() -> None:
    notes = plan_notes(plan(excluded=[]))
    assert notes[0] == "the layers hold 30.0 MB, over the soft limit of 10.0 MB; the largest files:"
    assert notes[1].split() == ["25.0", "MB", "code", "data/big.bin"]


def test_plain_renderer_prints_the_notes_after_the_scan_line() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=io.StringIO(), err=err, verbose=True)
    renderer.handle(
        Event(
            job_id="j1",
            seq=1,
            time=time.time(),
            kind=EventKind.stage,
            stage=Stage.scan,
            state="finished",
            text="3 files",
            data={"plan": plan().model_dump(mode="json")},
        )
    )
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("j2c: scan")
    assert "j2c:   secrets (1): .env" in lines
    assert any(line.endswith("data/big.bin") for line in lines)


def test_tty_renderer_writes_the_notes_above_the_board() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=True, out=io.StringIO(), err=err, verbose=True)
    scan = {"job_id": "j1", "time": time.time(), "kind": EventKind.stage, "stage": Stage.scan}
    renderer.handle(Event(seq=1, state="started", **scan))
    renderer.handle(
        Event(seq=2, state="finished", data={"plan": plan().model_dump(mode="json")}, **scan)
    )
    written = err.getvalue()
    notes_at = written.index("secrets (1): .env")
    assert written.rindex("scan      finished") > notes_at  # the board is redrawn below


def test_j2c_submit_lists_what_was_left_out_and_the_largest_files(
    run_j2c: Any, cli_project: Path, cli_venv: Path
) -> None:
    (cli_project / ".gitignore").write_text("outputs/\n*.log\n")
    (cli_project / "outputs").mkdir()
    (cli_project / "run.log").write_text("x")
    (cli_project / ".env").write_text("TOKEN=1\n")
    (cli_project / "weights.bin").write_bytes(b"\0" * 2 * 1024 * 1024)
    result = run_j2c(
        "submit",
        "train.py",
        "--venv-path",
        str(cli_venv),
        cwd=cli_project,
        env={"J2C_PACK__SOFT_LIMIT_MB": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "j2c:   secrets (1): .env" in result.stderr
    assert "j2c:   ignored by .gitignore (2): outputs/, run.log" in result.stderr
    assert "over the soft limit" in result.stderr
    largest = [line for line in result.stderr.splitlines() if "weights.bin" in line]
    assert largest and "2.1 MB" in largest[0], result.stderr
