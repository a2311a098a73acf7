"""What a job is given: the packer's spec, and the scheduler's job spec with its command, env and
image; the presigned manifest when jobs get no storage credentials.

Pure functions of the settings and the job's record (and the store, for its URIs), shared by the
pipeline's stages and by the service's dry run and preflight.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError, InvalidInput, PackError
from j2c_server.core.j2c_lines import TAG_ENV, line_tag
from j2c_server.core.job_env import MASK, credential_value, job_env, mask_env, split_env
from j2c_server.image.base_layer import ShipChoice
from j2c_server.image.check import image_report
from j2c_server.image.job_needs import needs_of
from j2c_server.image.runner import runner_needs, runner_warning
from j2c_server.image.store import InventoryStore
from j2c_server.pack import PackPlan, PackSpec
from j2c_server.pack.models import PackWarning
from j2c_server.schedulers import scheduler_class
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.multinode import unpack_options
from j2c_server.storage.base import ObjectStore, blob_key, file_blob_key
from j2c_server.storage.post_upload import ENV_NAME as POST_POLICY_ENV
from j2c_server.storage.redact import redact_url
from j2c_server.wire.api import JobRecord, JobRequest
from j2c_server.wire.image import ImageReport
from j2c_server.wire.manifest import JobNeeds, Layer, LayerRole, Manifest

MANIFEST_URL_ENV = "J2C_MANIFEST_URL"  # a presigned manifest's URL (unpack/job_secrets.py)


def pack_spec(settings: J2CSettings, record: JobRecord) -> PackSpec:
    """The packer's spec for a (resolved) request. Args and env stay out of the manifest:
    they go on the job's command line and environment, so changing them reuses the upload."""
    request = record.request
    return PackSpec.from_settings(
        settings.pack,
        code_path=request.code_path,
        call_path=request.call_path,
        venv_path=request.venv_path,
        excludes=request.excludes,
        includes=request.includes,
        compression_level=request.compression_level,
        source_image=job_image(settings, record),
        never_pack=[settings.data_path()],
        secret_scan_cache=layer_cache_dir(settings),
    )


def layer_cache_dir(settings: J2CSettings) -> Path:
    """Where packed layers are kept between runs (the packer reuses them by fingerprint)."""
    return settings.data_path() / "layers"


def job_image(settings: J2CSettings, record: JobRecord) -> str | None:
    return record.request.image or settings.lab_image()


async def record_image_report(settings: J2CSettings, record: JobRecord) -> ImageReport | None:
    """What the job's target lacks or has otherwise (:mod:`j2c_server.image`), for its image,
    and what of the lab's base ships with it."""
    request = record.request
    venv = Path(request.venv_path) if request.venv_path else None
    return await image_report(
        settings,
        record.scheduler,
        job_image(settings, record),
        venv,
        Path(request.code_path),
        ship_choice(settings, request),
        request.call_path,
        runner_needs(request.call_path),
    )


async def runner_check(
    settings: J2CSettings, record: JobRecord, report: ImageReport | None
) -> PackWarning | None:
    """A warning when the entry point's runner (a notebook's) lacks what it needs wherever the
    job looks: before anything is uploaded (image/runner.py)."""
    request = record.request
    needs = runner_needs(request.call_path)
    if not needs:
        return None
    inventory = None
    if report is not None and report.known:
        stored = await asyncio.to_thread(InventoryStore(settings.data_path()).get, report.key)
        inventory = stored.inventory if stored is not None else None
    venv = Path(request.venv_path) if request.venv_path else None
    return await asyncio.to_thread(runner_warning, needs, venv, report, inventory)


async def record_needs(
    settings: J2CSettings, record: JobRecord, report: ImageReport | None
) -> JobNeeds | None:
    """What the job needs of its base Python, for its manifest when the target is not known
    yet (the job checks it, unpack/needs.py); None for a known target or the lab's own."""
    if report is None or report.known or not settings.pack.check_in_job:
        return None
    request = record.request
    venv = Path(request.venv_path) if request.venv_path else None
    skip = [settings.data_path()]
    runner = runner_needs(request.call_path)
    return await asyncio.to_thread(
        needs_of, venv, Path(request.code_path), skip, request.call_path, runner
    )


def ship_choice(settings: J2CSettings, request: JobRequest) -> ShipChoice:
    """The settings' ``pack.ship_base_packages`` / ``pack.base_conflicts``, unless the job says."""
    enabled = settings.pack.ship_base_packages if request.ship_base is None else request.ship_base
    off_by = None
    if not enabled:
        off_by = (
            "--no-ship-base" if request.ship_base is False else "pack.ship_base_packages is off"
        )
    return ShipChoice(
        enabled=enabled,
        off_by=off_by,
        conflicts=request.base_conflicts or settings.pack.base_conflicts,
        force=request.force_base,
    )


def job_spec(
    settings: J2CSettings,
    record: JobRecord,
    manifest_uri: str,
    store: ObjectStore,
    *,
    manifest_digest: str,
    outputs_post: str | None = None,
) -> JobSpec:
    """What the scheduler gets: ``j2c-unpack <manifest> --manifest-digest <sha256:...>
    --output-uri <store> -- <args>`` in the job's image, with the request's env, ``J2C_JOB_ID``,
    the tag of j2c's lines (``J2C_LINE_TAG``) and where the store is. ``manifest_digest`` is
    the sha256 of the exact bytes at ``manifest_uri``: the job refuses any other manifest, so
    whoever else can write the store cannot swap a queued job's manifest. With presigned URLs
    the job uploads its outputs through ``outputs_post``, its upload policy
    (jobs/send/presigned_outputs.py), in ``$J2C_OUTPUTS_POST_CREDENTIAL``; without one it has
    no way to write to the store.

    Credentials are never in ``command`` or ``env``, which the scheduler keeps and shows: the
    operator's ``pass_env`` values, the upload policy and a signed manifest URL (on the command
    line as ``env:J2C_MANIFEST_URL``) are ``secret_env``, which each backend hands to the job by
    reference (schedulers/job_secrets.py)."""
    request = record.request
    unpack = scheduler_class(record.scheduler).unpack_command(settings)
    outputs = (
        [
            "--output-uri",
            store.uri(f"jobs/{record.id}/outputs"),
            *outputs_options(settings),
            *checkpoint_options(settings, record),
        ]
        if uploads_outputs(settings, outputs_post)
        else []
    )
    secret = {POST_POLICY_ENV: outputs_post} if outputs_post is not None else {}
    plain, passed = split_env(job_env(request.env, settings.scheduler.pass_env))
    secret.update(passed)
    manifest_arg = manifest_uri
    if credential_value(manifest_uri):  # a presigned URL: its signature is a bearer credential
        manifest_arg = f"env:{MANIFEST_URL_ENV}"
        secret[MANIFEST_URL_ENV] = manifest_uri
    return JobSpec(
        key=f"j2c-{record.id}",
        job_id=record.id,
        name=record.name,
        image=job_image(settings, record),
        command=[
            *unpack,
            manifest_arg,
            "--manifest-digest",
            manifest_digest,
            *outputs,
            *unpack_options(request.resources),
            "--",
            *request.args,
        ],
        env={
            # The operator's placement, unless the request's env asks for its own.
            **placement_env(settings),
            **plain,
            **store_location_env(settings, store),
            "J2C_JOB_ID": record.id,
            TAG_ENV: line_tag_of(record),  # j2c's lines in its log carry it (core/j2c_lines.py)
        },
        secret_env=secret,
        resources=request.resources,
    )


def line_tag_of(record: JobRecord) -> str:
    """The tag j2c's lines carry in the job's log: its own, or its sweep's for a variant (an
    array job's tasks share one environment)."""
    return line_tag(record.id, record.sweep.parent if record.sweep is not None else None)


def shown_spec(spec: JobSpec, settings: J2CSettings) -> dict[str, Any]:
    """``spec`` as it may be recorded and shown: signed URLs on its command line redacted, and
    every credential in its environment (``secret_env`` too, by name) masked."""
    env = mask_env(spec.env, settings.scheduler.pass_env)
    env.update(dict.fromkeys(spec.secret_env, MASK))
    shown = spec.model_copy(
        update={"command": [redact_url(part) for part in spec.command], "env": env}
    )
    return shown.model_dump(mode="json")


def uploads_outputs(settings: J2CSettings, outputs_post: str | None) -> bool:
    """Whether the job can upload its outputs: with the store's credentials, or presigned
    with its upload policy."""
    return not settings.storage.presign_for_jobs or outputs_post is not None


def placement_env(settings: J2CSettings) -> dict[str, str]:
    """``J2C_UNPACK_PATHS`` when ``scheduler.placement`` is not j2c-unpack's own default."""
    chosen = settings.scheduler.placement
    return {} if chosen == "original" else {"J2C_UNPACK_PATHS": chosen}


def outputs_options(settings: J2CSettings) -> list[str]:
    """The ``outputs.*`` settings on ``j2c-unpack``'s command line (a job has no config)."""
    chosen = settings.outputs
    return [
        f"--outputs-max-file-mb={chosen.max_file_mb:g}",
        f"--outputs-max-total-mb={chosen.max_total_mb:g}",
        f"--outputs-sync-minutes={chosen.sync_every_minutes:g}",
    ]


def checkpoint_dirs(settings: J2CSettings, record: JobRecord) -> list[str]:
    """The job's checkpoint folders (relative to its working directory): its own, else
    ``resume.checkpoint_dirs``."""
    chosen = record.request.checkpoint_dirs
    return list(settings.resume.checkpoint_dirs if chosen is None else chosen)


def checkpoint_options(settings: J2CSettings, record: JobRecord) -> list[str]:
    """The checkpoint folders and the ``resume.*`` settings of their sync on ``j2c-unpack``'s
    command line (unpack/checkpoints.py); none when the job has no checkpoint folder."""
    folders = checkpoint_dirs(settings, record)
    if not folders:
        return []
    chosen = settings.resume
    return [
        *(f"--checkpoint-dir={folder}" for folder in folders),
        f"--checkpoints-every-s={chosen.sync_every_s:g}",
        f"--checkpoints-keep={chosen.keep_last}",
        f"--checkpoints-max-mb={chosen.max_mb:g}",
    ]


def store_location_env(settings: J2CSettings, store: ObjectStore) -> dict[str, str]:
    """The ``J2C_STORAGE__*`` settings ``j2c-unpack`` needs to reach an S3-compatible store
    (endpoint, region, addressing): locations only, credentials come from the cluster."""
    if store.kind != "s3":
        return {}
    chosen = {
        "ENDPOINT_URL": settings.storage.endpoint_url,
        "REGION": settings.storage.region,
        "ADDRESSING_STYLE": settings.storage.addressing_style,
    }
    return {f"J2C_STORAGE__{name}": value for name, value in chosen.items() if value}


def refuse_if_over_limit(plan: PackPlan) -> None:
    """A plan over the hard limit is refused before anything is packed, naming the field of
    its largest layer."""
    if plan.refused:
        largest = max(plan.layers, key=lambda layer: layer.bytes)
        field = "venv_path" if largest.role == LayerRole.venv else "code_path"
        raise PackError(
            plan.refused,
            field=field,
            hint="exclude large data (excludes, .j2cignore) or raise pack.hard_limit_mb",
        )


def refuse_missing_imports(report: ImageReport | None, request: JobRequest) -> None:
    """Imports nothing will provide where the job runs, refused before anything is packed or
    uploaded (the job would die of ``ModuleNotFoundError`` after the whole round trip), unless
    the request allows them."""
    if report is None or not report.unprovided or request.allow_missing_imports:
        return
    named = "; ".join(
        f"{item.imported_by[0]} imports {item.name}" for item in report.unprovided[:5]
    )
    more = f" and {len(report.unprovided) - 5} more" if len(report.unprovided) > 5 else ""
    raise InvalidInput(
        f"{named}{more}: not in the venv, the lab or {report.target}",
        field="imports",
        hint="install it in the venv, use an image that has it, or send anyway with "
        "--allow-missing-imports (an optional import belongs in try/except ImportError)",
    )


async def presigned_manifest(
    settings: J2CSettings, store: ObjectStore, manifest: Manifest, job_id: str
) -> tuple[str, str]:
    """A per-job manifest whose layers carry presigned URLs, itself presigned: the job needs
    no storage credentials. Its presigned URL (recorded and shown only redacted) and the
    digest of the bytes stored there (``sha256:...``, for the job's ``--manifest-digest``)."""
    expiry = settings.storage.presign_expiry_s
    layers: list[Layer] = []
    for layer in manifest.layers:
        url = await store.presign(blob_key(layer.digest), expires_s=expiry)
        if url is None:
            raise ConfigError(
                f"storage.presign_for_jobs is on but the {store.kind} store cannot presign URLs",
                field="storage.presign_for_jobs",
            )
        layers.append(layer.model_copy(update={"url": url}))
    files = [  # big files: presigned like the layers (same store, so presign works)
        blob.model_copy(
            update={"url": await store.presign(file_blob_key(blob.digest), expires_s=expiry)}
        )
        for blob in manifest.files or []
    ]
    resolved = manifest.model_copy(update={"layers": layers, "files": files or None})
    key = f"jobs/{job_id}/manifest.json"
    body = resolved.canonical_json()
    await store.put_bytes(key, body)
    url = await store.presign(key, expires_s=expiry)
    assert url is not None  # the layers were presigned by the same store
    return url, "sha256:" + hashlib.sha256(body).hexdigest()
