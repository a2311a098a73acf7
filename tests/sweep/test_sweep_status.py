"""``j2c sweep status SWEEP`` on a real local sweep sent by ``j2c submit --sweep``: the table's
rows, the JSON's flat shape (one ``pandas.DataFrame`` row per variant), and clear refusals of
an unknown id, a plain job and a variant's id; ``%j2c sweep status`` returns the same rows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from j2c_server.magic.magics import run_line
from tests.support.frontends import RunJ2C

TRAIN = """\
import json, os, sys
lr, seed = float(sys.argv[1]), int(sys.argv[2])
out = os.path.join(os.environ["J2C_OUTPUT_DIR"], "metrics.json")
json.dump({"accuracy": lr + seed / 10, "loss": [1.0, 0.5, lr]}, open(out, "w"))
sys.exit(3 if (lr, seed) == (2.0, 1) else 0)
"""


@pytest.fixture
def sweep_id(run_j2c: RunJ2C, cli_project: Path, cli_venv: Path) -> str:
    (cli_project / "sweep.py").write_text(TRAIN)
    sent = run_j2c(
        *("submit", "sweep.py", "--venv-path", str(cli_venv), "--no-wait"),
        *("--sweep", "lr=1,2", "--sweep", "seed=0,1", "--", "{lr}", "{seed}"),
        cwd=cli_project,
    )
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip()


def _ended_rows(run_j2c: RunJ2C, sweep: str, timeout: float = 180) -> list[dict[str, Any]]:
    """The JSON rows once every variant ended and reported its metrics.json."""
    deadline = time.monotonic() + timeout
    while True:
        shown = run_j2c("sweep", "status", sweep, "--json")
        assert shown.returncode == 0, shown.stderr
        found: list[dict[str, Any]] = json.loads(shown.stdout)
        done = all(row["status"] in ("succeeded", "failed") for row in found)
        if (done and all(row["accuracy"] is not None for row in found)) or (
            time.monotonic() > deadline
        ):
            return found
        time.sleep(0.5)


def test_sweep_status_prints_one_row_per_variant_as_a_table_and_as_flat_json(
    run_j2c: RunJ2C, sweep_id: str
) -> None:
    found = _ended_rows(run_j2c, sweep_id)
    assert [list(row) for row in found] == [
        ["index", "job_id", "lr", "seed", "status", "duration_s", "exit_code", "accuracy", "loss"]
    ] * 4
    assert [(r["index"], r["job_id"], r["lr"], r["seed"]) for r in found] == [
        (0, f"{sweep_id}-0", "1", "0"),
        (1, f"{sweep_id}-1", "1", "1"),
        (2, f"{sweep_id}-2", "2", "0"),
        (3, f"{sweep_id}-3", "2", "1"),
    ]
    assert [(r["status"], r["exit_code"]) for r in found] == [
        ("succeeded", 0),
        ("succeeded", 0),
        ("succeeded", 0),
        ("failed", 3),
    ]
    assert [r["accuracy"] for r in found] == pytest.approx([1.0, 1.1, 2.0, 2.1])
    assert [r["loss"] for r in found] == [1.0, 1.0, 2.0, 2.0]  # a history's latest value
    assert all(isinstance(r["duration_s"], float) for r in found)
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(found)
    assert frame.shape == (4, 9) and list(frame["seed"]) == ["0", "1", "0", "1"]

    shown = run_j2c("sweep", "status", sweep_id[:-1], "--metric", "accuracy")  # a prefix works
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"sweep {sweep_id}: 3/4 succeeded, 1 failed"
    assert lines[1].split() == ["#", "JOB", "lr", "seed", "STATUS", "DURATION", "EXIT", "accuracy"]
    cells = [line.split() for line in lines[2:]]
    assert [(c[0], c[1], c[2], c[3], c[4]) for c in cells] == [
        (str(r["index"]), r["job_id"], r["lr"], r["seed"], r["status"]) for r in found
    ]
    assert [(c[-2], c[-1]) for c in cells] == [("0", "1"), ("0", "1.1"), ("0", "2"), ("3", "2.1")]


def test_the_magic_returns_the_same_rows_and_shows_the_table(
    run_j2c: RunJ2C, sweep_id: str, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = _ended_rows(run_j2c, sweep_id)
    monkeypatch.setenv("J2C_DATA_DIR", cli_env["J2C_DATA_DIR"])
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", cli_env["JUPYTER_CONFIG_DIR"])
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    rows = run_line(f"sweep status {sweep_id}", shell=None)
    assert [{k: v for k, v in r.items() if k != "duration_s"} for r in rows] == [
        {k: v for k, v in r.items() if k != "duration_s"} for r in found
    ]
    table = run_j2c("sweep", "status", sweep_id).stdout.rstrip("\n")
    assert repr(rows).splitlines()[:2] == table.splitlines()[:2]
    as_json = run_line(f"sweep status {sweep_id} --json", shell=None)
    assert json.loads(repr(as_json)) == list(as_json)


def test_an_unknown_id_a_plain_job_and_a_variant_are_refused(
    run_j2c: RunJ2C, sweep_id: str, cli_project: Path, cli_venv: Path
) -> None:
    unknown = run_j2c("sweep", "status", "no-such-job")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "j2c: error: no job with id 'no-such-job'" in unknown.stderr

    variant = run_j2c("sweep", "status", f"{sweep_id}-1")
    assert variant.returncode == 2 and variant.stdout == ""
    assert f"job {sweep_id}-1 is variant 1 of sweep {sweep_id}, not a sweep" in variant.stderr
    assert f"j2c: hint: `j2c sweep status {sweep_id}` shows every variant" in variant.stderr

    plain = run_j2c("submit", "train.py", "--venv-path", str(cli_venv), cwd=cli_project)
    assert plain.returncode == 0, plain.stderr
    job_id = json.loads(run_j2c("list", "--json").stdout)[0]["id"]
    refused = run_j2c("sweep", "status", job_id)
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"job {job_id} is not a sweep (it was sent without --sweep)" in refused.stderr
