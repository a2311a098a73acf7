"""Real PyTorch, killed and resumed: the example ``examples/torch-digits`` sent from a lab
user's venv (over Debian's ``python3-torch``) to the local scheduler; its runner is killed
(SIGKILL, as a lost machine ends it) once a checkpoint after step 10 was synced. The job runs
again as attempt 2 of the same job, restored from that checkpoint, and ends with the very
weights and loss of the same script run by hand without a break: same seed, same data, the
optimizer's momentum carried in the checkpoint."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from j2c_server.jobs.service import JobService
from j2c_server.wire.api import JobRequest, JobStatus
from tests.cli.test_torch_e2e import by_hand, finals, project, torch_venv
from tests.pipeline.test_attempts_local import _kill_runner, _lines, _settings, _until

__all__ = ["project", "torch_venv"]  # fixtures, used by name

ARGS = ["--steps", "40", "--log-every", "5", "--checkpoint-every", "5", "--sleep", "0.15"]
RESUMED = re.compile(r"^resumed from step (\d+) \(checkpoints/step-(\d+)\.pt\)$")


async def test_a_killed_pytorch_job_resumes_to_the_weights_of_an_unbroken_run(
    tmp_path: Path, project: Path, torch_venv: Path
) -> None:
    unbroken = by_hand(torch_venv, project, *ARGS)
    data = tmp_path / "data"
    settings = _settings(data)
    service = JobService(settings)
    service.start()
    try:
        record = await service.submit(
            JobRequest(
                code_path=str(project),
                call_path=str(project / "train.py"),
                venv_path=str(torch_venv),
                args=ARGS,
            )
        )
        await _until(service, record.id, "step 10/40", timeout_s=120)
        await _until(service, record.id, "j2c: checkpoints: synced", timeout_s=60)
        _kill_runner(data, await service.get(record.id))
        async with asyncio.timeout(180):
            final = await service.wait(record.id)
        lines = await _lines(service, record.id)
    finally:
        await service.stop()
    assert final.status == JobStatus.succeeded, lines
    assert final.attempt == 2 and final.attempts[0].interrupted, final.attempts
    (resumed,) = [m for line in lines if (m := RESUMED.match(line))]
    step = int(resumed[1])
    assert 10 <= step < 40 and int(resumed[2]) == step  # the synced checkpoint, not step 0
    assert final.attempts[1].resumed_from == f"checkpoints/step-{step:06d}.pt"
    # Bit for bit the unbroken run's weights, and its loss and accuracy.
    assert finals("\n".join(lines)) == [unbroken], lines[-5:]
