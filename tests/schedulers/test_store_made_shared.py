"""A store used privately, then switched to ``storage.shared: true`` (#48 a): the natural path
(``make lab``, a few local jobs on the default data dir, then ``scheduler: container``). The
blobs written while the store was private were 0600 (hard-linked with the layer cache), found
present by content address and never written again: every container job exited 66 ("cannot be
read"). Now a shared store counts an object other uids cannot read as absent, so the send that
reuses it writes a readable copy; the layer cache's own files stay private."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from tests.support.frontends import J2C
from tests.support.podman import Podman


def _j2c(home: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("J2C_", "JUPYTER_"))}
    # The default data dir (~/.local/share/jupyter/j2c) in a home only its user can enter.
    base.update(HOME=str(home), PYTHONUNBUFFERED="1", **env)
    return subprocess.run(
        [J2C, *args], cwd=cwd, env=base, capture_output=True, text=True, timeout=300
    )


def test_layers_written_privately_serve_a_container_job_once_the_store_is_shared(
    podman: Podman, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    for round_ in range(2):  # local jobs first: the store is private, its blobs 0600
        local = _j2c(home, cli_project, "submit", "train.py", "--venv-path", str(cli_venv))
        assert local.returncode == 0, local.stderr
        (cli_project / "train.py").write_text(
            (cli_project / "train.py").read_text() + f"\n# edit {round_}\n"
        )
    store = home / ".local" / "share" / "jupyter" / "j2c" / "store"
    blobs = [p for p in (store / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(not p.stat().st_mode & stat.S_IROTH for p in blobs)

    shared = {
        "J2C_STORAGE__SHARED": "true",
        "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
    }
    args = ["--venv-path", str(cli_venv), "--scheduler", "container", "--image", podman.image]
    ran = _j2c(home, cli_project, "submit", "train.py", "--json", *args, **shared)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    record = json.loads(ran.stdout)
    assert record["status"] == "succeeded" and record["scheduler"] == "container"
    # Every object this job read is readable by others now; the layer cache's stay private.
    cache = home / ".local" / "share" / "jupyter" / "j2c" / "layers"
    cached = [p for p in cache.rglob("*.tar.zst")]
    assert cached and all(not p.stat().st_mode & stat.S_IROTH for p in cached)
    for layer in record["stages"]["pack"]["output"]["layers"]:
        blob = store / "blobs" / "sha256" / f"{layer['digest'].removeprefix('sha256:')}.tar.zst"
        assert blob.stat().st_mode & stat.S_IROTH, blob


async def test_preflight_says_what_a_store_made_shared_will_publish_again(tmp_path: Path) -> None:
    from j2c_server.config import J2CSettings
    from j2c_server.jobs.send.preflight import STORE_MADE_SHARED, warn_store_at_preflight
    from j2c_server.pack.models import PackPlan

    store = tmp_path / "store"
    (store / "blobs" / "sha256").mkdir(parents=True)
    for name, mode in (("a.tar.zst", 0o600), ("b.tar.zst", 0o600), ("c.tar.zst", 0o644)):
        (store / "blobs" / "sha256" / name).write_bytes(b"x")
        (store / "blobs" / "sha256" / name).chmod(mode)
    settings = J2CSettings.model_validate(
        {"storage": {"url": store.as_uri(), "shared": True}, "data_dir": str(tmp_path / "d")}
    )
    plan = PackPlan.model_construct(warnings=[])
    warned = await warn_store_at_preflight(plan, settings, "container")
    [note] = [w for w in warned.warnings if w.code == STORE_MADE_SHARED]
    assert note.message.startswith("2 objects of the store") and note.path == "storage.shared"
    private = settings.model_copy(
        update={"storage": settings.storage.model_copy(update={"shared": False})}
    )
    assert not [w for w in (await warn_store_at_preflight(plan, private, "local")).warnings]
