"""The Docker Engine ``POST /containers/create`` request for one :class:`JobSpec` (pure: no I/O).

``render_create`` is what the container backend sends and what ``j2c submit --scheduler
container --dry-run`` prints. The container's name derives from the request's idempotency key
(the key itself is a label), so a retried create finds its own container.

What the job sees:

- of a ``file://`` store, only its own files, each bind-mounted read-only under ``/j2c/store``
  at its path in the store: the manifest and the layer and big-file blobs that manifest names
  (:func:`store_files`, which reads the manifest), and the store folder its outputs are uploaded
  to (``--output-uri``) writable. ``j2c-unpack`` is handed those in-container paths
  (:func:`job_command`): the host's path may sit under a folder the job's uid cannot traverse in
  the image (a root server's data dir under ``/root``, 0700 there). Other jobs' manifests,
  layers and outputs in the same store are not in the container at all;
- ``HOME`` (``/j2c/home``) and ``$J2C_OUTPUT_DIR`` (``/j2c/outputs``): writable per-job folders
  of the host (``<runs dir>/<name>/``), so tools that write under HOME work as any uid;
- its uid's and user's layer cache (``/j2c/cache``, ``J2C_UNPACK_CACHE``), when one is given
  (:mod:`.folders`); binds carry podman's ``U`` where the job's uid gets its folders
  that way, and ``UsernsMode: keep-id`` on rootless podman when it runs as the server's uid;
- the configured uid:gid, CPU and memory limits, GPUs as CDI devices or device requests;
- no capability (``CapDrop: [ALL]``, ``cap_add`` names those given back), ``no-new-privileges``
  (a setuid binary in the image gains nothing), a ``PidsLimit``;
- S3 locations through the ``J2C_STORAGE__*`` env only: storage credentials come from a
  read-only ``credentials_dir`` mount (a request's credential-like env is refused upstream);
- no credential in the create request (``podman inspect`` shows it, and a job waiting for GPUs
  keeps it in ``gpu-request.json``): the job's secret env (schedulers/job_secrets.py) is a file
  of its own folder, ``secrets/env.json`` (0600, the job's uid's), bound read-only at
  ``/j2c/secrets`` and named by ``$J2C_SECRETS_FILE``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from j2c_server.config import J2CSettings
from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import (
    JobSpec,
    not_a_memory_size,
    not_a_size_setting,
    required_image,
)
from j2c_server.schedulers.container.engine import Access
from j2c_server.schedulers.container.lifecycle import (
    LABEL_RUNS,
    LABEL_TIME_LIMIT,
    runs_label,
    time_limit_s,
)
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.status import END_FILE
from j2c_server.schedulers.job_secrets import SECRETS_FILE_ENV, job_secrets
from j2c_server.schedulers.multinode import DEFAULT_MASTER_PORT
from j2c_server.schedulers.unpack_cache import CACHE_ENV, CACHE_MAX_ENV

LABEL_MANAGED_BY = "j2c.io/managed-by"
LABEL_KEY = "j2c.io/key"
LABEL_JOB_ID = "j2c.io/job-id"
LABEL_NAME = "j2c.io/name"
LABEL_RANK = "j2c.io/rank"
HOME = "/j2c/home"
OUTPUTS = "/j2c/outputs"
STORE = "/j2c/store"
CACHE = "/j2c/cache"
SECRETS = "/j2c/secrets"
SECRETS_NAME = "env.json"
RUNS_DIR = "containers"

_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(i?)B?$", re.IGNORECASE)
_BLOB_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MANIFEST_LIMIT = 16 * 1024 * 1024
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def container_name(key: str, rank: int = 0) -> str:
    """A job's container (rank 0: the job's own name, which its handle carries), or rank k's
    of a multi-node job (``<name>-r<k>``)."""
    name = "j2c-" + hashlib.sha256(key.encode()).hexdigest()[:20]
    return name if rank == 0 else f"{name}-r{rank}"


def network_name(key: str) -> str:
    """The network of a multi-node job's containers, its own (made and removed by j2c)."""
    return container_name(key) + "-net"


def rank_folder(folder: Path, rank: int) -> Path:
    """Rank k's HOME and outputs live under the job's folder (rank 0's are the job's own)."""
    return folder if rank == 0 else folder / "ranks" / str(rank)


def runs_root(settings: J2CSettings) -> Path:
    configured = settings.scheduler.section("container", ContainerSettings).runs_dir
    root = Path(configured).expanduser() if configured else settings.data_path() / RUNS_DIR
    return root.absolute()


def size_bytes(text: str) -> int | None:
    """'16Gi', '8G', '8g', '512MB', '1024' → bytes (G and Gi both binary, as engines read
    them); None when it is not a size."""
    match = _SIZE_RE.match(text.strip())
    if match is None:
        return None
    number, unit, _ = match.groups()
    return int(float(number) * 1024 ** _POWERS[unit.upper()])


def parse_user(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def file_store_root(settings: J2CSettings) -> Path | None:
    return _file_path(settings.storage_url())


def _file_path(uri: str) -> Path | None:
    parts = urlsplit(uri)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def output_upload_dir(spec: JobSpec, settings: J2CSettings) -> Path | None:
    """The store folder ``--output-uri`` names, when it is in the ``file://`` store."""
    command = _unpack_options(spec)
    if "--output-uri" not in command[:-1]:
        return None
    target = _file_path(command[command.index("--output-uri") + 1])
    root = file_store_root(settings)
    if target is None or root is None or not target.is_relative_to(root):
        return None
    return target


def _unpack_options(spec: JobSpec) -> list[str]:
    return spec.command[: spec.command.index("--")] if "--" in spec.command else spec.command


def manifest_path(spec: JobSpec, settings: J2CSettings) -> Path | None:
    """The ``file://`` store manifest ``j2c-unpack`` is given, when the store is ``file://``."""
    root = file_store_root(settings)
    if root is None:
        return None
    options = _unpack_options(spec)
    for index, part in enumerate(options[1:], start=1):
        if options[index - 1] == "--output-uri":
            continue
        path = _file_path(part)
        if path is not None and path.suffix == ".json" and path.is_relative_to(root):
            return path
    return None


def store_files(spec: JobSpec, settings: J2CSettings) -> list[Path]:
    """The store files the job reads: its manifest, and the blobs of the layers and big files it
    names (those without their own ``url``). Reads the manifest: call it off the event loop. A
    manifest that cannot be read gives only itself (``j2c-unpack`` then says what is wrong)."""
    manifest = manifest_path(spec, settings)
    root = file_store_root(settings)
    if manifest is None or root is None:
        return []
    files = [manifest]
    plan = _restore_plan(spec, root)
    if plan is not None:  # a resumed attempt's restore plan (unpack/restore.py)
        files.append(plan)
    try:
        with manifest.open("rb") as handle:
            data = json.loads(handle.read(_MANIFEST_LIMIT))
        layers = data.get("layers") if isinstance(data, dict) else None
    except (OSError, ValueError):
        return files
    big = data.get("files") if isinstance(data, dict) else None
    for entries, suffix in ((layers, ".tar.zst"), (big, ".file")):
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("url"):
                continue
            digest = entry.get("digest")
            if isinstance(digest, str) and _BLOB_DIGEST.match(digest):
                blob = root / "blobs" / "sha256" / f"{digest.partition(':')[2]}{suffix}"
                if blob not in files:
                    files.append(blob)
    return files


def _restore_plan(spec: JobSpec, root: Path) -> Path | None:
    """The ``file://`` store's restore plan ``--restore`` names, if any."""
    options = _unpack_options(spec)
    if "--restore" not in options[:-1]:
        return None
    path = _file_path(options[options.index("--restore") + 1])
    return path if path is not None and path.is_relative_to(root) else None


def in_container(path: Path, root: Path) -> str:
    """Where the store file (or folder) ``path`` is mounted in the job's container."""
    return f"{STORE}/{path.relative_to(root).as_posix()}"


def job_command(spec: JobSpec, settings: J2CSettings) -> list[str]:
    """``spec.command`` with every ``file://`` URI of the store among ``j2c-unpack``'s own
    options (the manifest, ``--output-uri``) pointing where the container has it mounted; the
    entry point's arguments (after ``--``) are left as they are."""
    root = file_store_root(settings)
    own = _unpack_options(spec)
    if root is None:
        return list(spec.command)
    rewritten = []
    for part in own:
        path = _file_path(part)
        if path is not None and path.is_relative_to(root):
            part = "file://" + quote(in_container(path, root))
        rewritten.append(part)
    return rewritten + spec.command[len(own) :]


def _env(
    spec: JobSpec, settings: J2CSettings, cfg: ContainerSettings, cache: Path | None, rank: int
) -> list[str]:
    # Credentials (the operator's pass_env, the outputs policy, a presigned manifest, anything
    # whose name or value says it is one) are in the job's secrets file, not here.
    env, secret = job_secrets(spec, cfg.env)
    if secret:
        env[SECRETS_FILE_ENV] = f"{SECRETS}/{SECRETS_NAME}"
    if settings.storage.shared and file_store_root(settings) is not None:
        # The outputs j2c-unpack uploads stay readable by the server's uid (not 0600 to the job's).
        env["J2C_STORAGE__SHARED"] = "true"
    env.update(
        HOME=HOME,
        J2C_OUTPUT_DIR=OUTPUTS,
        J2C_JOB_ID=spec.job_id,
        PYTHONUNBUFFERED="1",
        # j2c-unpack's end record: a container without one was killed (status.py).
        J2C_UNPACK_END_FILE=f"{OUTPUTS}/{END_FILE}",
    )
    if spec.resources.nodes > 1:  # the rendezvous j2c-unpack turns into torchrun's (ranks.py)
        env.update(
            J2C_NODE_RANK=str(rank),
            MASTER_ADDR=container_name(spec.key),
            MASTER_PORT=str(DEFAULT_MASTER_PORT),
        )
    if cache is not None:
        env[CACHE_ENV] = CACHE
        if cfg.cache_max:
            env[CACHE_MAX_ENV] = cfg.cache_max
    return [f"{name}={value}" for name, value in sorted(env.items())]


def _resources(spec: JobSpec, cfg: ContainerSettings, gpus: list[str]) -> dict[str, Any]:
    host: dict[str, Any] = {}
    if spec.resources.cpus is not None:
        host["NanoCpus"] = int(spec.resources.cpus * 1e9)
    if spec.resources.memory is not None:
        memory = size_bytes(spec.resources.memory)
        if memory is None:
            raise not_a_memory_size(spec.resources.memory)
        host["Memory"] = memory
    if cfg.shm_size:
        shm = size_bytes(cfg.shm_size)
        if shm is None:
            raise not_a_size_setting("scheduler.container.shm_size", cfg.shm_size, "8G")
        host["ShmSize"] = shm
    if gpus and cfg.gpu_mode == "cdi":
        host["Devices"] = [
            {"PathOnHost": f"{cfg.cdi_kind}={gpu}", "PathInContainer": "", "CgroupPermissions": ""}
            for gpu in gpus
        ]
    elif gpus:
        host["DeviceRequests"] = [
            {"Driver": "nvidia", "DeviceIDs": list(gpus), "Capabilities": [["gpu"]]}
        ]
    return host


def job_folder(settings: J2CSettings, spec_key: str) -> Path:
    return runs_root(settings) / container_name(spec_key)


def _binds(
    spec: JobSpec,
    settings: J2CSettings,
    files: list[Path],
    cache: Path | None,
    access: Access,
    rank: int = 0,
) -> list[str]:
    folder = rank_folder(job_folder(settings, spec.key), rank)
    # U: podman gives the folder to the uid the job has on the host (folders.py).
    rw = "rw,U" if access.chown_binds else "rw"
    binds = [f"{folder / 'home'}:{HOME}:{rw}", f"{folder / 'outputs'}:{OUTPUTS}:{rw}"]
    # One file at a time, never the store's folder: the store holds every job's code and outputs.
    root = file_store_root(settings)
    if root is not None:
        binds.extend(f"{path}:{in_container(path, root)}:ro" for path in files)
        upload = output_upload_dir(spec, settings)
        if upload is not None:
            binds.append(f"{upload}:{in_container(upload, root)}:{rw}")
    if cache is not None:
        binds.append(f"{cache}:{CACHE}:{rw}")
    if job_secrets(spec, settings.scheduler.section("container", ContainerSettings).env)[1]:
        ro = "ro,U" if access.chown_binds else "ro"
        binds.append(f"{job_folder(settings, spec.key) / 'secrets'}:{SECRETS}:{ro}")
    credentials = settings.scheduler.section("container", ContainerSettings).credentials_dir
    if credentials:
        binds.append(f"{Path(credentials).expanduser().absolute()}:{HOME}/.aws:ro")
    return binds


def _manifest_only(spec: JobSpec, settings: J2CSettings) -> list[Path]:
    manifest = manifest_path(spec, settings)
    return [manifest] if manifest is not None else []


def _labels(spec: JobSpec, settings: J2CSettings, cfg: ContainerSettings) -> dict[str, str]:
    labels = {
        LABEL_MANAGED_BY: "j2c",
        LABEL_KEY: spec.key,
        LABEL_JOB_ID: spec.job_id,
        LABEL_NAME: spec.name,
        LABEL_RUNS: runs_label(runs_root(settings)),  # whose: a restart sweeps only its own
    }
    limit = time_limit_s(spec, cfg)
    if limit is not None:
        labels[LABEL_TIME_LIMIT] = f"{limit:g}"
    return labels


def _hardening(cfg: ContainerSettings) -> dict[str, Any]:
    """Every capability dropped (a setting names those given back), no privilege gained by
    setuid binaries or file capabilities in the image, a bound on processes."""
    host: dict[str, Any] = {
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
    }
    if cfg.cap_add:
        host["CapAdd"] = list(cfg.cap_add)
    if cfg.pids_limit:
        host["PidsLimit"] = cfg.pids_limit
    return host


def render_create(
    spec: JobSpec,
    settings: J2CSettings,
    *,
    gpu_devices: list[str] | None = None,
    files: list[Path] | None = None,
    cache: Path | None = None,
    access: Access | None = None,
    rank: int = 0,
) -> dict[str, Any]:
    """``{"name": ..., "body": ...}`` of ``POST /containers/create?name=...``. ``gpu_devices``
    are the GPUs the ledger granted (the dry run shows the first ones); ``files`` are the store
    files to mount (:func:`store_files`; default: the manifest alone); ``cache`` the host folder
    of the job's layer cache (None: none), ``access`` how the job's uid gets its folders;
    ``rank`` the node rank of a multi-node job's container (each on the job's own network,
    rank 0's name as ``MASTER_ADDR``)."""
    cfg = settings.scheduler.section("container", ContainerSettings)
    if not spec.command:
        raise InvalidInput("the job has no command to run", field="command")
    gpus = gpu_devices
    if gpus is None:
        gpus = [str(index) for index in range(spec.resources.gpus)]
    if files is None:
        files = _manifest_only(spec, settings)
    command = job_command(spec, settings)
    access = access or Access()
    host: dict[str, Any] = {
        "Binds": _binds(spec, settings, files, cache, access, rank),
        "Init": True,  # a real PID 1 forwards SIGTERM and reaps what the job leaves behind
        **_resources(spec, cfg, gpus),
        **_hardening(cfg),
    }
    if cfg.network:
        host["NetworkMode"] = cfg.network
    elif spec.resources.nodes > 1:
        host["NetworkMode"] = network_name(spec.key)
    if access.userns:
        host["UsernsMode"] = access.userns
    body: dict[str, Any] = {
        "Image": required_image(spec, settings),
        # The whole command replaces the image's entrypoint, as a Kubernetes `command` does.
        "Entrypoint": command[:1],
        "Cmd": command[1:],
        "Env": _env(spec, settings, cfg, cache, rank),
        "User": cfg.job_user(),
        "WorkingDir": HOME,
        "Tty": False,
        "OpenStdin": False,
        "StopSignal": "SIGTERM",
        "StopTimeout": int(cfg.cancel_grace_s),
        "Labels": {**_labels(spec, settings, cfg), LABEL_RANK: str(rank)},
        "HostConfig": host,
    }
    return {"name": container_name(spec.key, rank), "body": body}
