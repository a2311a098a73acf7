"""The one line that says a job ended, for front ends that are not watching it: the cell of a
``%j2c submit --no-wait`` and the terminal of a ``j2c submit --no-wait --notify`` (the CLI opens
its controlling terminal at start; the detached watcher inherits that descriptor and writes the
line there when the job ends, if the terminal is still open).

"j2c: job 20261202-1907-ab12cd (train) succeeded (exit code 0) in 42 s", the words of the Lab's
toast (``src/browserNotify.ts``), with the duration counted the same way.
"""

from __future__ import annotations

import os

from j2c_server.core.units import duration
from j2c_server.wire.api import JobRecord, JobStatus


def job_seconds(record: JobRecord) -> float:
    """From its start (or creation, if it never started) to its end."""
    start = record.started_at if record.started_at is not None else record.created_at
    end = record.finished_at if record.finished_at is not None else record.updated_at
    return max(0.0, end - start)


def end_line(record: JobRecord) -> str:
    """How the job ended, on one line; the job's message when it failed or was lost."""
    code = f" (exit code {record.exit_code})" if record.exit_code is not None else ""
    line = (
        f"j2c: job {record.id} ({record.name}) {record.status.value}{code} "
        f"in {duration(job_seconds(record))}"
    )
    if record.status in (JobStatus.failed, JobStatus.lost) and record.message:
        line += f": {record.message}"
    return line


def open_terminal() -> int | None:
    """This process's controlling terminal, opened for writing (never made a controlling
    terminal of anyone else); None when there is none (cron, CI, a pipe without a tty)."""
    try:
        return os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


def tell_terminal(fd: int, record: JobRecord) -> bool:
    """Write the end line on the terminal ``fd`` (then closed); False when that terminal is
    gone (closed since: the write fails with EIO), which is no error."""
    try:
        os.write(fd, f"\r\n{end_line(record)}\r\n".encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
