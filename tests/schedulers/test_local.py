"""The local scheduler, with real detached processes: no mocks.

Jobs are small Python programs. Where a test must hold a job at some point, the job waits for a
"gate" file that the test creates, so no test depends on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, InvalidInput
from j2c_server.core.j2c_lines import TAG_ENV, line_tag, parse_line
from j2c_server.schedulers import make_scheduler
from j2c_server.schedulers.base import JobSpec, LogLine, Scheduler
from j2c_server.schedulers.local.backend import LocalScheduler
from j2c_server.schedulers.logfile import MAX_LINE_BYTES
from j2c_server.schedulers.state_files import same_process
from j2c_server.wire.api import JobHandle, JobStatus, Resources

TIMEOUT_S = 30.0
MakeScheduler = Callable[..., LocalScheduler]

# Prepended to every job: wait_for(path) blocks until the test opens that gate.
_PRELUDE = """\
import os, sys, time
def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)
"""


def python_job(code: str) -> list[str]:
    return [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)]


def job_spec(job_id: str, code: str, *, gpus: int = 0, **fields: Any) -> JobSpec:
    fields.setdefault("key", f"key-{job_id}")
    return JobSpec(
        job_id=job_id,
        name=job_id,
        command=python_job(code),
        resources=Resources(gpus=gpus),
        **fields,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The scheduler's data dir; every job still alive at the end is killed."""
    data = tmp_path / "data"
    yield data
    for record_path in (data / "runs").glob("*/job.json"):
        record = json.loads(record_path.read_text())
        child, supervisor = record.get("child"), record.get("supervisor")
        if child and same_process(child["pid"], child["start_time"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child["pid"], signal.SIGKILL)
        if supervisor and same_process(supervisor["pid"], supervisor["start_time"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor["pid"], signal.SIGKILL)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """The test's own machine-wide GPU ledger (the default one is shared by every test run)."""
    return tmp_path / "gpu-ledger"


@pytest.fixture
def make_scheduler_with(data_dir: Path, ledger: Path) -> MakeScheduler:
    """A LocalScheduler on the test's data dir; keywords are ``scheduler.local`` settings."""

    def make(**local: Any) -> LocalScheduler:
        local.setdefault("cancel_grace_s", 2.0)
        # Supervisors import j2c_server: this checkout's, not whatever else is installed.
        local.setdefault("pass_env", ["PYTHONPATH"])
        settings = J2CSettings.model_validate(
            {
                "data_dir": str(data_dir),
                "scheduler": {"local": local, "gpu_ledger": str(ledger)},
            }
        )
        return LocalScheduler(settings)

    return make


@pytest.fixture
def scheduler(make_scheduler_with: MakeScheduler) -> LocalScheduler:
    return make_scheduler_with(gpus=2)


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


async def collect(
    scheduler: LocalScheduler, handle: JobHandle, cursor: str | None = None
) -> list[LogLine]:
    async def read_all() -> list[LogLine]:
        return [line async for line in scheduler.follow_logs(handle, cursor)]

    return await asyncio.wait_for(read_all(), TIMEOUT_S)


async def texts(scheduler: LocalScheduler, handle: JobHandle) -> list[str]:
    return [line.text for line in await collect(scheduler, handle)]


async def wait_status(scheduler: LocalScheduler, handle: JobHandle, *wanted: JobStatus) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        state = await scheduler.status(handle)
        if state.status in wanted:
            return state
        assert time.monotonic() < deadline, f"still {state} after {TIMEOUT_S}s"
        await asyncio.sleep(0.02)


async def wait_file(path: Path) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline, f"{path} never written"
        await asyncio.sleep(0.02)
    return path.read_text()


def run_dir(handle: JobHandle) -> Path:
    return Path(handle.data["run_dir"])


def gone(pid: int) -> bool:
    """No such process, or only its zombie (this machine's init may not reap orphans)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_supervisor_and_job(handle: JobHandle) -> None:
    record = json.loads((run_dir(handle) / "job.json").read_text())
    os.kill(record["supervisor"]["pid"], signal.SIGKILL)
    os.killpg(record["child"]["pid"], signal.SIGKILL)


# --------------------------------------------------------------------------- registration


def test_local_is_the_registered_backend_and_speaks_the_protocol(data_dir: Path) -> None:
    scheduler = make_scheduler("local", J2CSettings(data_dir=str(data_dir)))
    assert isinstance(scheduler, LocalScheduler)
    assert isinstance(scheduler, Scheduler)


# --------------------------------------------------------------------------- logs


async def test_lines_arrive_in_order_exactly_once(scheduler: LocalScheduler) -> None:
    handle = await scheduler.submit(
        job_spec(
            "ordered",
            """
            for i in range(500):
                print(f"line {i}")
                if i % 100 == 0:
                    time.sleep(0.05)
            """,
        )
    )
    lines = await collect(scheduler, handle)
    assert [line.text for line in lines] == [f"line {i}" for i in range(500)]
    cursors = [int(line.cursor) for line in lines]
    assert cursors == sorted(set(cursors))
    assert cursors[-1] == (run_dir(handle) / "output.log").stat().st_size


async def test_a_partial_line_waits_for_its_newline(scheduler: LocalScheduler, gates: Path) -> None:
    handle = await scheduler.submit(
        job_spec(
            "partial-waits",
            f"""
            sys.stdout.write("abc"); sys.stdout.flush()
            open({str(gates / "written")!r}, "w").write("\\n")
            wait_for({str(gates / "finish")!r})
            print("def")
            """,
        )
    )
    seen: list[str] = []

    async def follow() -> None:
        async for line in scheduler.follow_logs(handle):
            seen.append(line.text)

    follower = asyncio.create_task(follow())
    await wait_file(gates / "written")
    await asyncio.sleep(0.3)  # several poll intervals with "abc" sitting in the file
    assert seen == []
    (gates / "finish").touch()
    await asyncio.wait_for(follower, TIMEOUT_S)
    assert seen == ["abcdef"]


async def test_a_last_line_without_newline_is_delivered_when_the_job_ends(
    scheduler: LocalScheduler,
) -> None:
    handle = await scheduler.submit(
        job_spec("partial-end", 'sys.stdout.write("first\\nlast without newline")')
    )
    lines = await collect(scheduler, handle)
    assert [line.text for line in lines] == ["first", "last without newline"]
    assert int(lines[-1].cursor) == (run_dir(handle) / "output.log").stat().st_size


async def test_carriage_returns_stay_inside_lines(scheduler: LocalScheduler) -> None:
    handle = await scheduler.submit(
        job_spec("progress", 'sys.stdout.write("10%\\r50%\\r100%\\nwindows\\r\\n")')
    )
    assert await texts(scheduler, handle) == ["10%\r50%\r100%", "windows\r"]


async def test_stderr_lines_arrive_in_the_same_stream(scheduler: LocalScheduler) -> None:
    """One log file holds both, in order: which stream a line came from is not known (None),
    rather than every line called stdout."""
    handle = await scheduler.submit(
        job_spec("stderr", 'print("out", flush=True); print("err", file=sys.stderr)')
    )
    lines = await collect(scheduler, handle)
    assert [(line.text, line.stream) for line in lines] == [("out", None), ("err", None)]


async def test_invalid_utf8_is_replaced_not_fatal(scheduler: LocalScheduler) -> None:
    handle = await scheduler.submit(
        job_spec("bytes", 'sys.stdout.buffer.write(b"ok \\xff\\xfe bytes\\n\\xe2\\x82\\xac\\n")')
    )
    assert await texts(scheduler, handle) == ["ok \ufffd\ufffd bytes", "\u20ac"]


async def test_an_endless_progress_bar_arrives_in_bounded_pieces_cut_after_a_return(
    scheduler: LocalScheduler,
) -> None:
    handle = await scheduler.submit(
        job_spec(
            "long-line",
            """
            for i in range(20000):
                sys.stdout.write(f"\\rstep {i:05d}")
            print()
            """,
        )
    )
    pieces = await texts(scheduler, handle)
    assert len(pieces) > 1
    assert all(len(piece.encode()) <= MAX_LINE_BYTES for piece in pieces)
    assert all(piece.endswith("\r") for piece in pieces[:-1])
    assert "".join(pieces) == "".join(f"\rstep {i:05d}" for i in range(20000))


async def test_a_cursor_that_is_not_a_byte_offset_is_invalid_input_naming_the_field(
    scheduler: LocalScheduler,
) -> None:
    handle = await scheduler.submit(job_spec("cursor", "print(1)"))
    with pytest.raises(InvalidInput) as caught:
        scheduler.follow_logs(handle, "line-7")
    assert caught.value.field == "cursor"


# --------------------------------------------------------------------------- status


async def test_a_job_that_exits_0_succeeded(scheduler: LocalScheduler) -> None:
    handle = await scheduler.submit(job_spec("ok", "print('hi')"))
    state = await wait_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
    assert (state.status, state.exit_code) == (JobStatus.succeeded, 0)


async def test_a_failing_job_records_its_exit_code(scheduler: LocalScheduler) -> None:
    handle = await scheduler.submit(job_spec("fails", "sys.exit(3)"))
    state = await wait_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
    assert (state.status, state.exit_code) == (JobStatus.failed, 3)
    assert state.message == "exit code 3"
    assert (await scheduler.results(handle)).exit_code == 3


async def test_a_job_killed_by_a_signal_reports_128_plus_the_signal(
    scheduler: LocalScheduler,
) -> None:
    handle = await scheduler.submit(
        job_spec("killed", "import signal; os.kill(os.getpid(), signal.SIGKILL)")
    )
    state = await wait_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
    assert (state.status, state.exit_code) == (JobStatus.failed, 137)
    assert state.message is not None and "SIGKILL" in state.message


async def test_a_command_that_cannot_start_fails_with_127_and_says_why(
    scheduler: LocalScheduler, tmp_path: Path
) -> None:
    """The supervisor's line is j2c's: it carries the job's tag, as j2c-unpack's do."""
    missing = str(tmp_path / "no-such-program")
    tag = line_tag("missing")
    handle = await scheduler.submit(
        JobSpec(
            key="k-missing",
            job_id="missing",
            name="missing",
            command=[missing],
            env={TAG_ENV: tag},
        )
    )
    state = await wait_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
    assert (state.status, state.exit_code) == (JobStatus.failed, 127)
    [line] = await texts(scheduler, handle)
    said = parse_line(line, tag)
    assert said is not None and (said.level, said.phase) == ("error", "start")
    assert said.text.startswith(f"cannot start {missing!r}")


async def test_a_running_job_reports_running(scheduler: LocalScheduler, gates: Path) -> None:
    handle = await scheduler.submit(job_spec("runs", f"wait_for({str(gates / 'end')!r})"))
    await wait_status(scheduler, handle, JobStatus.running)
    (gates / "end").touch()
    await wait_status(scheduler, handle, JobStatus.succeeded)


async def test_a_job_killed_together_with_its_supervisor_is_lost(
    scheduler: LocalScheduler, gates: Path
) -> None:
    handle = await scheduler.submit(job_spec("lost", f"wait_for({str(gates / 'never')!r})"))
    await wait_status(scheduler, handle, JobStatus.running)
    kill_supervisor_and_job(handle)
    state = await wait_status(scheduler, handle, JobStatus.lost)
    assert state.message is not None and "no exit record" in state.message


async def test_following_the_logs_of_a_lost_job_ends_after_what_was_written(
    scheduler: LocalScheduler, gates: Path
) -> None:
    handle = await scheduler.submit(
        job_spec(
            "lost-logs",
            f"""
            print("before", flush=True)
            open({str(gates / "printed")!r}, "w").write("\\n")
            wait_for({str(gates / "never")!r})
            """,
        )
    )
    await wait_file(gates / "printed")
    kill_supervisor_and_job(handle)
    assert await texts(scheduler, handle) == ["before"]


async def test_a_job_that_reaches_its_time_limit_is_stopped_and_failed(
    scheduler: LocalScheduler, data_dir: Path, gates: Path
) -> None:
    # Requests give whole minutes; to keep this test short, its supervisor reads a hand-written
    # spec with a 0.3 s limit instead of one the scheduler wrote.
    run = data_dir / "runs" / "limited"
    (run / "work").mkdir(parents=True)
    (run / "outputs").mkdir()
    spec = {
        "job_id": "limited",
        "command": python_job(f"wait_for({str(gates / 'never')!r})"),
        "env": {},
        "gpus": 0,
        "gpu_devices": [],
        "cancel_grace_s": 2.0,
        "time_limit_s": 0.3,
        "submitted_at": time.time(),
    }
    (run / "spec.json").write_text(json.dumps(spec))
    supervise = (
        "import sys; from pathlib import Path; "
        "from j2c_server.schedulers.local.runner import Supervisor; "
        "from j2c_server.schedulers.local.files import RunDir; "
        "Supervisor(RunDir(Path(sys.argv[1]))).main()"
    )
    supervisor = await asyncio.create_subprocess_exec(sys.executable, "-c", supervise, str(run))
    assert await asyncio.wait_for(supervisor.wait(), TIMEOUT_S) == 0
    handle = JobHandle(scheduler="local", id="limited", data={"run_dir": str(run)})
    state = await scheduler.status(handle)
    assert (state.status, state.exit_code) == (JobStatus.failed, 143)
    assert state.message == "timed out after 0.005 min: exit code 143 (killed by SIGTERM)"


# --------------------------------------------------------------------------- idempotency


async def test_a_repeated_submit_of_one_key_adopts_the_job(
    scheduler: LocalScheduler, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    code = f"open({str(starts)!r}, 'a').write('started\\n')"
    first = await scheduler.submit(job_spec("adopt", code, key="same"))
    again = await scheduler.submit(job_spec("adopt", code, key="same"))
    other_id = await scheduler.submit(job_spec("adopt-2", code, key="same"))
    assert first == again == other_id
    await wait_status(scheduler, first, JobStatus.succeeded)
    assert starts.read_text() == "started\n"


async def test_concurrent_submits_of_one_key_start_one_job(
    scheduler: LocalScheduler, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    spec = job_spec("race", f"open({str(starts)!r}, 'a').write('started\\n')")
    handles = await asyncio.gather(*(scheduler.submit(spec) for _ in range(6)))
    assert len({handle.id for handle in handles}) == 1
    await wait_status(scheduler, handles[0], JobStatus.succeeded)
    assert starts.read_text() == "started\n"


async def test_a_job_id_used_by_another_request_is_a_conflict_naming_the_field(
    scheduler: LocalScheduler,
) -> None:
    await scheduler.submit(job_spec("taken", "print(1)", key="first"))
    with pytest.raises(Conflict) as caught:
        await scheduler.submit(job_spec("taken", "print(2)", key="second"))
    assert caught.value.field == "job_id"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"job_id": "../escape"}, "job_id"),
        ({"job_id": ""}, "job_id"),
        ({"command": []}, "command"),
    ],
)
async def test_a_bad_spec_is_invalid_input_naming_the_field(
    scheduler: LocalScheduler, data_dir: Path, fields: dict[str, Any], field: str
) -> None:
    spec = job_spec("bad", "print(1)").model_copy(update=fields)
    with pytest.raises(InvalidInput) as caught:
        await scheduler.submit(spec)
    assert caught.value.field == field
    assert not list((data_dir / "runs").glob("*/spec.json"))


# --------------------------------------------------------------------------- cancel


async def test_cancel_ends_the_job_and_its_whole_process_group(
    scheduler: LocalScheduler, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    handle = await scheduler.submit(
        job_spec(
            "cancel",
            f"""
            import subprocess
            helper = subprocess.Popen(["sleep", "300"])
            open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{helper.pid}}\\n")
            helper.wait()
            """,
        )
    )
    job_pid, helper_pid = map(int, (await wait_file(pids)).split())
    await scheduler.cancel(handle)
    state = await wait_status(scheduler, handle, JobStatus.cancelled)
    assert state.message == "cancelled"
    assert gone(job_pid)
    assert gone(helper_pid)


async def test_cancel_forwards_sigterm_so_the_job_can_clean_up(
    scheduler: LocalScheduler, gates: Path
) -> None:
    handle = await scheduler.submit(
        job_spec(
            "graceful",
            f"""
            import signal
            def stop(signum, frame):
                print("cleaning up after", signal.Signals(signum).name, flush=True)
                sys.exit(0)
            signal.signal(signal.SIGTERM, stop)
            open({str(gates / "ready")!r}, "w").write("\\n")
            wait_for({str(gates / "never")!r})
            """,
        )
    )
    await wait_file(gates / "ready")
    await scheduler.cancel(handle)
    state = await wait_status(scheduler, handle, JobStatus.cancelled)
    assert state.exit_code == 0
    assert await texts(scheduler, handle) == ["cleaning up after SIGTERM"]


async def test_cancel_escalates_to_sigkill_after_the_grace(
    make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    scheduler = make_scheduler_with(cancel_grace_s=0.3)
    handle = await scheduler.submit(
        job_spec(
            "stubborn",
            f"""
            import signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open({str(gates / "ready")!r}, "w").write("\\n")
            wait_for({str(gates / "never")!r})
            """,
        )
    )
    await wait_file(gates / "ready")
    await scheduler.cancel(handle)
    state = await wait_status(scheduler, handle, JobStatus.cancelled)
    assert state.exit_code == 137


async def test_a_job_is_cancelling_until_it_has_stopped(
    scheduler: LocalScheduler, gates: Path
) -> None:
    handle = await scheduler.submit(
        job_spec(
            "slow-stop",
            f"""
            import signal
            def stop(signum, frame):
                wait_for({str(gates / "stop")!r})
                sys.exit(0)
            signal.signal(signal.SIGTERM, stop)
            open({str(gates / "ready")!r}, "w").write("\\n")
            wait_for({str(gates / "never")!r})
            """,
        )
    )
    await wait_file(gates / "ready")
    await scheduler.cancel(handle)
    assert (await scheduler.status(handle)).status == JobStatus.cancelling
    (gates / "stop").touch()
    await wait_status(scheduler, handle, JobStatus.cancelled)


async def test_cancel_is_idempotent_and_leaves_a_finished_job_alone(
    scheduler: LocalScheduler, gates: Path
) -> None:
    running = await scheduler.submit(job_spec("twice", f"wait_for({str(gates / 'no')!r})"))
    finished = await scheduler.submit(job_spec("done", "print('done')"))
    await wait_status(scheduler, running, JobStatus.running)
    await wait_status(scheduler, finished, JobStatus.succeeded)
    for _ in range(2):
        await scheduler.cancel(running)
        await scheduler.cancel(finished)
    await wait_status(scheduler, running, JobStatus.cancelled)
    await scheduler.cancel(running)
    assert (await scheduler.status(running)).status == JobStatus.cancelled
    assert (await scheduler.status(finished)).status == JobStatus.succeeded


async def test_cancelling_a_lost_job_kills_what_its_dead_supervisor_left_running(
    scheduler: LocalScheduler, gates: Path
) -> None:
    handle = await scheduler.submit(job_spec("orphaned", f"wait_for({str(gates / 'never')!r})"))
    await wait_status(scheduler, handle, JobStatus.running)
    record = json.loads((run_dir(handle) / "job.json").read_text())
    os.kill(record["supervisor"]["pid"], signal.SIGKILL)
    await wait_status(scheduler, handle, JobStatus.lost)
    assert not gone(record["child"]["pid"])
    await scheduler.cancel(handle)
    deadline = time.monotonic() + TIMEOUT_S
    while not gone(record["child"]["pid"]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- surviving the server


async def test_a_job_outlives_the_process_that_submitted_it(
    data_dir: Path, make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    submitter = f"""
import asyncio, sys
from j2c_server.config import J2CSettings
from j2c_server.schedulers.local.backend import LocalScheduler
from j2c_server.schedulers.base import JobSpec
spec = JobSpec.model_validate_json(sys.argv[1])
scheduler = LocalScheduler(J2CSettings(data_dir={str(data_dir)!r}))
print(asyncio.run(scheduler.submit(spec)).model_dump_json())
"""
    spec = job_spec(
        "orphan",
        f"""
        print("started", flush=True)
        wait_for({str(gates / "go")!r})
        print("finished after its submitter had gone")
        """,
    )
    done = subprocess.run(
        [sys.executable, "-c", submitter, spec.model_dump_json()],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    handle = JobHandle.model_validate_json(done.stdout)
    fresh = make_scheduler_with()  # a restarted server knows the job only by its handle
    await wait_status(fresh, handle, JobStatus.running)
    (gates / "go").touch()
    assert await texts(fresh, handle) == ["started", "finished after its submitter had gone"]
    assert (await fresh.status(handle)).status == JobStatus.succeeded


# --------------------------------------------------------------------------- environment


async def test_the_job_env_is_the_spec_env_over_a_sane_base(
    scheduler: LocalScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "server-secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    handle = await scheduler.submit(
        job_spec(
            "env",
            """
            import json
            print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}))
            """,
            env={"MY_SETTING": "42", "LANG": "C.UTF-8"},
        )
    )
    [line] = await texts(scheduler, handle)
    seen = json.loads(line)
    env, run = seen["env"], run_dir(handle)
    assert env["MY_SETTING"] == "42"
    assert env["LANG"] == "C.UTF-8"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"] == os.environ["PATH"]
    assert env["J2C_OUTPUT_DIR"] == str(run / "outputs")
    assert env["J2C_JOB_ID"] == "env"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert "JUPYTERHUB_API_TOKEN" not in env
    assert seen["cwd"] == str(run / "work")


async def test_operators_can_pass_more_server_variables(
    make_scheduler_with: MakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", "/cache/hf")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OTHER", "kept out")
    scheduler = make_scheduler_with(pass_env=["HF_*", "WANDB_MODE"])
    handle = await scheduler.submit(
        job_spec(
            "pass",
            "print(os.environ.get('HF_HOME'), os.environ.get('WANDB_MODE'), "
            "os.environ.get('OTHER'))",
        )
    )
    assert await texts(scheduler, handle) == ["/cache/hf offline None"]


# --------------------------------------------------------------------------- GPUs


def gpu_job(job_id: str, gate: Path, gpus: int = 1) -> JobSpec:
    return job_spec(
        job_id,
        f"""
        print(os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        wait_for({str(gate)!r})
        """,
        gpus=gpus,
    )


async def first_line(scheduler: LocalScheduler, handle: JobHandle) -> str:
    async for line in scheduler.follow_logs(handle):
        return line.text
    raise AssertionError("the job printed nothing")


async def test_gpu_jobs_get_distinct_devices_and_a_third_waits_until_one_ends(
    scheduler: LocalScheduler, gates: Path
) -> None:
    a = await scheduler.submit(gpu_job("gpu-a", gates / "a"))
    b = await scheduler.submit(gpu_job("gpu-b", gates / "b"))
    devices_a, devices_b = await first_line(scheduler, a), await first_line(scheduler, b)
    assert {devices_a, devices_b} == {"0", "1"}

    c = await scheduler.submit(gpu_job("gpu-c", gates / "c"))
    queued = await wait_status(scheduler, c, JobStatus.queued)
    assert queued.message == "waiting for 1 GPU: next in line, 0 free"

    (gates / "a").touch()
    await wait_status(scheduler, a, JobStatus.succeeded)
    await wait_status(scheduler, c, JobStatus.running)
    assert await first_line(scheduler, c) == devices_a
    assert (await scheduler.status(b)).status == JobStatus.running


async def test_queued_jobs_start_in_submission_order(
    make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    scheduler = make_scheduler_with(gpus=2)
    holder = await scheduler.submit(gpu_job("hold", gates / "hold", gpus=2))
    await wait_status(scheduler, holder, JobStatus.running)
    wide = await scheduler.submit(gpu_job("wide", gates / "wide", gpus=2))
    await wait_status(scheduler, wide, JobStatus.queued)
    narrow = await scheduler.submit(gpu_job("narrow", gates / "narrow"))
    await wait_status(scheduler, narrow, JobStatus.queued)

    (gates / "hold").touch()
    await wait_status(scheduler, wide, JobStatus.running)
    assert (await scheduler.status(narrow)).status == JobStatus.queued


async def test_a_cancelled_queued_job_never_starts(
    make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    scheduler = make_scheduler_with(gpus=1)
    holder = await scheduler.submit(gpu_job("busy", gates / "busy"))
    await wait_status(scheduler, holder, JobStatus.running)
    waiting = await scheduler.submit(gpu_job("waits", gates / "waits"))
    await wait_status(scheduler, waiting, JobStatus.queued)

    await scheduler.cancel(waiting)
    state = await wait_status(scheduler, waiting, JobStatus.cancelled)
    assert state.exit_code is None
    assert await texts(scheduler, waiting) == []
    assert (await scheduler.status(holder)).status == JobStatus.running


async def test_a_job_without_gpus_sees_none_and_never_waits(
    make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    scheduler = make_scheduler_with(gpus=1)
    holder = await scheduler.submit(gpu_job("all-gpus", gates / "all"))
    await wait_status(scheduler, holder, JobStatus.running)
    cpu_only = await scheduler.submit(
        job_spec("cpu", "print(repr(os.environ['CUDA_VISIBLE_DEVICES']))")
    )
    assert await texts(scheduler, cpu_only) == ["''"]


async def test_asking_for_more_gpus_than_the_machine_has_is_invalid_input(
    scheduler: LocalScheduler, data_dir: Path
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await scheduler.submit(job_spec("greedy", "print(1)", gpus=3))
    assert caught.value.field == "resources.gpus"
    assert "3 GPU(s)" in caught.value.message and "has 2" in caught.value.message
    assert not list((data_dir / "runs").glob("*/spec.json"))


async def test_the_gpus_of_a_lost_job_go_to_the_next_one(
    make_scheduler_with: MakeScheduler, gates: Path
) -> None:
    scheduler = make_scheduler_with(gpus=1)
    lost = await scheduler.submit(gpu_job("dies", gates / "never"))
    await wait_status(scheduler, lost, JobStatus.running)
    kill_supervisor_and_job(lost)
    successor = await scheduler.submit(gpu_job("next", gates / "next"))
    assert await first_line(scheduler, successor) == "0"


def test_gpus_are_counted_with_nvidia_smi_when_not_configured(
    make_scheduler_with: MakeScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No GPU here: a stand-in nvidia-smi prints what the real one prints for three GPUs.
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        + "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})'\n" for i in range(3))
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert make_scheduler_with().gpu_devices() == ["0", "1", "2"]


def test_a_lab_given_some_gpus_shares_exactly_those(
    make_scheduler_with: MakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert make_scheduler_with().gpu_devices() == ["2", "3"]


def test_a_machine_without_nvidia_smi_has_no_gpus(
    make_scheduler_with: MakeScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert make_scheduler_with().gpu_devices() == []


# --------------------------------------------------------------------------- results


async def test_results_list_the_output_files_and_the_executed_notebook(
    scheduler: LocalScheduler,
) -> None:
    handle = await scheduler.submit(
        job_spec(
            "outputs",
            """
            out = os.environ["J2C_OUTPUT_DIR"]
            os.makedirs(os.path.join(out, "metrics"))
            open(os.path.join(out, "model.bin"), "wb").write(b"\\0" * 10)
            open(os.path.join(out, "metrics", "final.json"), "w").write("{}")
            open(os.path.join(out, "train.ipynb"), "w").write("{}")
            """,
        )
    )
    await wait_status(scheduler, handle, JobStatus.succeeded)
    results = await scheduler.results(handle)
    outputs = run_dir(handle) / "outputs"
    assert results.exit_code == 0
    assert [(a.name, a.size) for a in results.artifacts] == [
        ("metrics/final.json", 2),
        ("model.bin", 10),
        ("train.ipynb", 2),
    ]
    assert results.artifacts[1].url == (outputs / "model.bin").as_uri()
    assert results.executed_notebook == (outputs / "train.ipynb").as_uri()
    assert results.output_uri == outputs.as_uri()
