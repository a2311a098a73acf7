"""``python -m j2c_server.jobs.detached_watcher JOB_ID``: a watcher that outlives the CLI or kernel.

Started by :meth:`JobService.run_detached_watcher` in its own session. It reads the spawner's
settings from stdin (JSON; not from the command line, where other users could read it), takes
the job's lease as soon as nobody else holds it, watches the job to its end and exits. SIGTERM
or SIGINT release the lease first, so the next process takes over at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from j2c_server.config import J2CSettings, load_settings, validate_settings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.service import JobService

log = logging.getLogger("j2c.watch")


def _settings_from_stdin() -> J2CSettings:
    raw = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    if not raw.strip():
        return load_settings()
    return validate_settings(json.loads(raw), source="stdin")


async def _watch(settings: J2CSettings, job_id: str) -> int:
    service = JobService(settings, log=log)
    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        record = await service.watch(job_id)
        log.info("job %s ended: %s", job_id, record.status.value)
        return 0
    except asyncio.CancelledError:
        log.info("job %s: stopped watching (signal)", job_id)
        return 0
    finally:
        await service.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if len(args) != 1:
        print("usage: python -m j2c_server.jobs.detached_watcher JOB_ID", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_watch(_settings_from_stdin(), args[0]))
    except J2CError as exc:
        log.error("job %s: %s", args[0], exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
