"""``%j2c results JOB [--copy DIR]`` in a real kernel: the outputs a job wrote in its working
copy, listed and copied next to the notebook with their relative paths."""

from __future__ import annotations

from pathlib import Path

from tests.magic.test_magic_kernel import Kernel, kernel  # noqa: F401  (the fixture)

WRITES = "import os\nos.makedirs('models')\nopen('models/a.bin', 'wb').write(b'weights')\n"


def test_results_lists_and_copies_a_jobs_outputs(kernel: Kernel, cli_project: Path) -> None:  # noqa: F811
    (cli_project / "writes.py").write_text(WRITES)
    kernel.run(f"job = %j2c submit writes.py --venv-path {kernel.venv}")
    job_id = kernel.run("print(job.id)").stdout.strip()
    listed = kernel.run(f"%j2c results {job_id}")
    assert listed.error is None, listed.stderr
    assert "  models/a.bin  7 B  sha256:" in listed.stdout
    copied = kernel.run(f"%j2c results {job_id} --copy here")
    assert copied.error is None, copied.stderr
    assert (cli_project / "here" / "models" / "a.bin").read_bytes() == b"weights"
