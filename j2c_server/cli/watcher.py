"""``python -m j2c_server.cli.watcher JOB_ID [--notify-fd N]``: a watcher that outlives the CLI
or kernel (a process of the CLI's kind: a full service, no terminal).

Started by :meth:`JobService.run_detached_watcher` in its own session. It reads the spawner's
settings from stdin (JSON; not from the command line, where other users could read it), takes
the job's lease as soon as nobody else holds it, watches the job to its end and exits. SIGTERM
or SIGINT release the lease first, so the next process takes over at once. With
``--notify-fd``, an inherited descriptor of the terminal ``j2c submit --notify`` ran in, it
writes the job's end line there (:mod:`j2c_server.jobs.end_notice`); a terminal closed meanwhile
is only noted in its log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from j2c_server.config import J2CSettings, load_settings, validate_settings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.end_notice import tell_terminal
from j2c_server.sweeps.hook import job_service

log = logging.getLogger("j2c.watch")


def _settings_from_stdin() -> J2CSettings:
    raw = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    if not raw.strip():
        return load_settings()
    return validate_settings(json.loads(raw), source="stdin")


async def _watch(settings: J2CSettings, job_id: str, notify_fd: int | None) -> int:
    service = job_service(settings, log=log)
    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        record = await service.watch(job_id)
        log.info("job %s ended: %s", job_id, record.status.value)
        if notify_fd is not None:
            told = tell_terminal(notify_fd, record)
            log.info("job %s: %s", job_id, "terminal told" if told else "its terminal is closed")
        return 0
    except asyncio.CancelledError:
        log.info("job %s: stopped watching (signal)", job_id)
        return 0
    finally:
        await service.stop()


_USAGE = "usage: python -m j2c_server.cli.watcher JOB_ID [--notify-fd N]"


def _parse(args: list[str]) -> tuple[str, int | None] | None:
    if len(args) == 1:
        return args[0], None
    if len(args) == 3 and args[1] == "--notify-fd" and args[2].isdigit():
        return args[0], int(args[2])
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parsed = _parse(args)
    if parsed is None:
        print(_USAGE, file=sys.stderr)
        return 2
    try:
        return asyncio.run(_watch(_settings_from_stdin(), *parsed))
    except J2CError as exc:
        log.error("job %s: %s", args[0], exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
