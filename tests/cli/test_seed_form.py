"""The original tool's form, typed from any folder: ``--call-path`` is inside ``--code-path``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def seed_args(project: Path, venv: Path) -> list[str]:
    return ["--code-path", str(project), "--call-path", "train.py", "--venv-path", str(venv)]


def test_pack_from_another_folder(
    run_j2c: Any, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_j2c("pack", *seed_args(cli_project, cli_venv), "--", "--lines", "1", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["args ['--lines', '1']", "line 0", "oops"]


def test_dry_run_from_another_folder(
    run_j2c: Any, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    result = run_j2c("submit", *seed_args(cli_project, cli_venv), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train.py" in json.dumps(json.loads(result.stdout))


def test_build_with_relative_code_path_from_its_parent(
    run_j2c: Any, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    store = (tmp_path / "store").as_uri()
    result = run_j2c(
        "build",
        "--code-path",
        cli_project.name,
        "--call-path",
        "train.py",
        "--venv-path",
        str(cli_venv),
        "--store",
        store,
        cwd=cli_project.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(store)
