"""The compute side stays light: what a real job's ``j2c-unpack`` (``--output-uri`` given, as
every job the server submits) imports on a warm start.

Through the real ``j2c-unpack`` main in a subprocess, with a real cache folder and a real
``file://`` output store: the run is checked to have uploaded its outputs, then its
``sys.modules`` are checked against what the server side only may load (pydantic, the settings,
the scheduler table, the Jupyter server, the HTTP and S3 clients).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unpack.conftest import SmallJob

# j2c-unpack's main, then every module it imported (a JSON list on stderr's last line).
_UNPACK_AND_LIST = (
    "import json, sys\n"
    "from j2c_server.unpack.__main__ import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    "sys.exit(code)\n"
)
# Never on a warm start that uploads to a file:// store (the S3 client: only for s3://).
SERVER_SIDE = (
    "pydantic",
    "pydantic_core",
    "j2c_server.config",
    "j2c_server.wire.api",
    "j2c_server.schedulers",
    "j2c_server.jobs",
    "j2c_server.server.handlers",
    "j2c_server.server.app",
    "jupyter_server",
    "tornado",
    "IPython",
    "httpx",
    "aiobotocore",
    "botocore",
    "yaml",
)


# What only a cold start needs: fetching layers, relocating a venv. (Every start extracts its
# code from the code layer's blob, checked against the manifest: the extraction and zstandard
# are a warm start's too, about 7 ms of imports.)
BUILDERS = (
    "j2c_server.unpack.downloads",
    "j2c_server.unpack.relocate",
)


def _unpack(
    uri: str, cache: Path, *options: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    options = ("--cache-dir", str(cache), *options, "--")
    done = subprocess.run(
        [sys.executable, "-c", _UNPACK_AND_LIST, uri, *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" in done.stdout
    modules = set(json.loads(done.stderr.rstrip().rsplit("\n", 1)[-1]))
    return done, modules


def _loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(module.startswith(f"{name}.") for module in modules)


def test_a_warm_start_uploading_to_a_file_store_loads_nothing_of_the_server(
    small_job: SmallJob, tmp_path: Path
) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    outputs = tmp_path / "outputs"
    relocate = ("--paths", "relocate")
    _unpack(uri, cache, *relocate, "--output-uri", outputs.as_uri())  # cold: keeps the plan
    warm, modules = _unpack(uri, cache, *relocate, "--output-uri", (outputs / "again").as_uri())
    assert "(validated before on this node)" in warm.stderr
    assert (outputs / "again" / "result.txt").read_text() == "done"
    assert (outputs / "again" / ".j2c-outputs.json").is_file()
    assert "j2c_server.storage.file" in modules  # the check sees what it ran
    loaded = [name for name in SERVER_SIDE if _loaded(modules, name)]
    assert loaded == [], f"a warm start with --output-uri imported {loaded}"


def test_a_warm_start_at_original_paths_loads_nothing_that_builds(
    small_job: SmallJob, tmp_path: Path
) -> None:
    uri = small_job.publish()
    small_job.project.parent.rename(tmp_path / "lab moved away")  # original paths free
    cache = tmp_path / "cache"
    cold, cold_modules = _unpack(uri, cache)
    warm, modules = _unpack(uri, cache)
    assert "0 of 2 layers from the cache" in cold.stderr
    assert {"j2c_server.unpack.extract", "j2c_server.unpack.relocate"} <= cold_modules
    assert "2 of 2 layers from the cache, 0 built" in warm.stderr
    assert f"venv at {small_job.venv}: " in warm.stderr  # original paths, not relocated
    loaded = [name for name in BUILDERS if _loaded(modules, name)]
    assert loaded == [], f"a warm start imported {loaded}"
