"""``src/models.ts`` is generated from the pydantic wire models and kept up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from j2c_server.server.schema_export import main, typescript, wire_schema


def test_models_ts_is_up_to_date() -> None:
    check = subprocess.run(
        [sys.executable, "-m", "j2c_server.server.schema_export", "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_check_fails_when_the_file_is_stale(tmp_path: Path) -> None:
    stale = tmp_path / "models.ts"
    stale.write_text("export interface JobRecord {}\n")
    assert main(["--check", "--output", str(stale)]) == 1


def test_every_wire_model_becomes_a_type() -> None:
    source = typescript(wire_schema())
    for name in ("JobRequest", "JobRecord", "Event", "ServerConfig", "PackPlan"):
        assert f"export interface {name} {{" in source


def test_enums_become_string_unions() -> None:
    source = typescript(wire_schema())
    assert "export type JobStatus =\n  | 'pending'\n" in source


def test_optional_fields_are_optional_and_nullable() -> None:
    source = typescript(wire_schema())
    assert "  venv_path?: string | null;\n" in source
    assert "  code_path: string;\n" in source
