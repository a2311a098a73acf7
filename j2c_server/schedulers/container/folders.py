"""The host folders a container job writes — its HOME, outputs, the store folder its outputs are
uploaded to, and the node layer cache — given to the job's uid, never world-writable.

How the job's uid gets them depends on who the server is and on the engine
(:class:`~.engine.EngineInfo`):

- a root server: ``chown`` to the job's uid:gid (a rootful engine maps uids 1:1);
- the job runs as the server's own uid: the server owns them; on rootless podman the container
  runs with ``UsernsMode: keep-id``, so that uid is the server's uid on the host too;
- another uid, podman: the binds carry ``U`` (podman chowns the folder to the uid the job has on
  the host, rootful or rootless);
- another uid, Docker, not root: a POSIX ACL for the job's uid (``setfacl``), else refused with
  what to set instead.

Folders are ``0700`` (``0755`` for outputs and the upload folder when the server must read
what another uid owns); the job folder above them is ``0700`` and the server's.

The layer cache (``scheduler.container.cache``) is ``<cache_dir>/<uid>/<user>/``, bound at
``/j2c/cache``: one per job uid (a job never sees another uid's entries, so it cannot write into
them) and one per user (:func:`~.unpack_cache.tenant_name`: users who share a uid do not share
entries). The levels above it are the server's and ``0700``. A folder found with another owner
or writable by group or others is not used: the job then runs without the cache (logged), as
``j2c-unpack`` itself refuses such a cache.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.container.engine import Access
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import parse_user
from j2c_server.schedulers.unpack_cache import tenant_name

CACHE_DIR = "unpack-cache"
log = logging.getLogger("j2c")


def cache_root(settings: J2CSettings) -> Path:
    configured = settings.scheduler.section("container", ContainerSettings).cache_dir
    root = Path(configured).expanduser() if configured else settings.data_path() / CACHE_DIR
    return root.absolute()


def cache_folder(settings: J2CSettings) -> Path | None:
    """The job uid's and this user's cache folder on the host (None: the cache is off)."""
    cfg = settings.scheduler.section("container", ContainerSettings)
    if not cfg.cache:
        return None
    uid = parse_user(cfg.job_user())[0]
    return cache_root(settings) / str(uid) / tenant_name()


def prepare(
    folders: list[Path], readable: list[Path], cfg: ContainerSettings, access: Access
) -> None:
    """``folders`` (and ``readable``: the server reads them back) made and given to the job."""
    uid, gid = parse_user(cfg.job_user())
    me = os.geteuid()
    for path in [*folders, *readable]:
        path.mkdir(parents=True, exist_ok=True)
        shared = path in readable and access.chown_binds
        path.chmod(0o755 if shared else 0o700)
        if me == 0:
            os.chown(path, uid, gid)
        elif uid != me and not access.chown_binds:
            _grant_acl(path, uid)


def give_file(path: Path, cfg: ContainerSettings, access: Access) -> None:
    """A file j2c wrote for the job (0600) readable by the job's uid: chowned by a root server;
    the server's own when the job runs as the server; podman's ``U`` on the folder's bind gives
    it over; else (Docker, not root) a POSIX ACL for that uid."""
    uid, gid = parse_user(cfg.job_user())
    me = os.geteuid()
    if me == 0:
        os.chown(path, uid, gid)
    elif uid != me and not access.chown_binds:
        _grant_acl(path, uid, folder=False)


def _grant_acl(path: Path, uid: int, *, folder: bool = True) -> None:
    tool = shutil.which("setfacl")
    if tool is None:
        raise ConfigError(
            f"container jobs run as uid {uid}, not this server's uid {os.geteuid()}, and this "
            "engine cannot give them their folders (no podman, not root, no setfacl): j2c "
            "does not make them writable by everyone",
            field="scheduler.container.user",
            hint=f"set scheduler.container.user to {os.getuid()}:{os.getgid()}, or use podman",
        )
    entries = f"u:{uid}:rwx,d:u:{uid}:rwx,d:u:{os.geteuid()}:rwx" if folder else f"u:{uid}:r"
    done = subprocess.run(
        [tool, "-m", entries, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ConfigError(
            f"giving {path} to the job's uid {uid} failed: {done.stderr.strip()}",
            field="scheduler.container.user",
        )


def prepare_cache(folder: Path, cfg: ContainerSettings, access: Access) -> Path | None:
    """The cache folder, made (levels above it the server's, ``0700``) and checked; None when
    it is not safe to use (logged: the job runs without the cache)."""
    uid, gid = parse_user(cfg.job_user())
    me = os.geteuid()
    try:
        for level in (folder.parent.parent, folder.parent):
            # Concurrent submits make the same levels: one that another made first is fine.
            level.mkdir(parents=True, mode=0o700, exist_ok=True)
            if problem := _not_private(level, {me}):
                log.warning("j2c: the layer cache is not used: %s %s", level, problem)
                return None
        if me != 0 and uid != me and not access.chown_binds:
            # An ACL makes the folder look group-writable: j2c-unpack would refuse it.
            log.warning("j2c: the layer cache is not used: jobs run as another uid (%d)", uid)
            return None
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made before (or by a concurrent submit, which gives it its owner)
        else:
            if me == 0:
                os.chown(folder, uid, gid)
        # podman's U makes it the job's wherever it was; otherwise it must be the job's already.
        owners = None if access.chown_binds else {uid if me == 0 else me}
        if problem := _not_private(folder, owners):
            log.warning("j2c: the layer cache is not used: %s %s", folder, problem)
            return None
    except (OSError, ConfigError) as exc:
        log.warning("j2c: the layer cache is not used: %s cannot be prepared (%s)", folder, exc)
        return None
    return folder


def _not_private(path: Path, owners: set[int] | None) -> str | None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if owners is not None and st.st_uid not in owners:
        return f"belongs to uid {st.st_uid}, not {sorted(owners)[0]}"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {oct(st.st_mode & 0o777)})"
    return None
