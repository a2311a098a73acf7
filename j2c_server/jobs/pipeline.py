"""The staged pipeline: scan → pack → upload → configure → submit → watch → results.

Every stage is idempotent and keyed by a hash of its inputs, stored with its output in
``JobRecord.stages``. A job that is resumed (after a restart) goes straight to watching once it
was submitted; before that, its stages run again and find their work already done (layers by
fingerprint, blobs by digest). Each stage is compared with the same stage of the project's
previous job, and the event says what was reused and why anything ran again
("venv layer reused: unchanged since job X", "configure re-run: args changed since job X").

Packing, hashing and compressing run in niced worker processes (:mod:`.pack_worker`), at most
``settings.pack.max_concurrent_packs`` at a time.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import J2CSettings
from ..errors import ConfigError, PackError
from ..jobenv import job_env, mask_env
from ..models import (
    EventKind,
    JobHandle,
    JobRecord,
    JobStatus,
    Layer,
    LayerRole,
    Manifest,
    Stage,
    StageRecord,
    StageState,
)
from ..pack import (
    PackPlan,
    PackProgress,
    PackResult,
    PackSpec,
    make_manifest,
    publish,
)
from ..schedulers import scheduler_class
from ..schedulers.base import JobSpec, SchedulerState
from ..schedulers.multinode import unpack_options
from ..storage.base import ObjectStore, blob_key
from ..storage.redact import redact_url
from ..units import byte_size as _size
from ..units import count as _count
from .clients import Clients
from .journal import Journal, ProgressMeter
from .results import collect_outputs
from .tracking import abandon_run, finish_run, start_run
from .watch_stage import Log, Watcher, until_available

LAST_LINES = 20


def digest_of(value: Any) -> str:
    """A short, stable hash of a JSON-able value."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


@dataclass
class StageInputs:
    """A stage's inputs by name; the key hashes them all, the parts say what changed."""

    values: dict[str, Any]

    @property
    def parts(self) -> dict[str, str]:
        return {name: digest_of(value) for name, value in self.values.items()}

    @property
    def key(self) -> str:
        return digest_of(self.parts)

    def changed_since(self, record: StageRecord) -> list[str]:
        before: dict[str, str] = record.output.get("inputs", {})
        return [name for name, part in self.parts.items() if before.get(name) != part]


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


def job_spec(
    settings: J2CSettings, record: JobRecord, manifest_uri: str, store: ObjectStore
) -> JobSpec:
    """What the scheduler gets: ``j2c-unpack <manifest> --output-uri <store> -- <args>`` in the
    job's image, with the request's env, ``J2C_JOB_ID`` and where the store is (never a
    credential). With presigned URLs the job has no way to write to the store, so its outputs
    stay where the scheduler keeps them."""
    request = record.request
    unpack = scheduler_class(record.scheduler).unpack_command(settings)
    outputs = (
        []
        if settings.storage.presign_for_jobs
        else [
            "--output-uri",
            store.uri(f"jobs/{record.id}/outputs"),
        ]
    )
    return JobSpec(
        key=f"j2c-{record.id}",
        job_id=record.id,
        name=record.name,
        image=job_image(settings, record),
        command=[
            *unpack,
            manifest_uri,
            *outputs,
            *unpack_options(request.resources),
            "--",
            *request.args,
        ],
        env={
            **job_env(request.env, settings.scheduler.pass_env),
            **store_location_env(settings, store),
            "J2C_JOB_ID": record.id,
        },
        resources=request.resources,
    )


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


class Pipeline:
    """Runs one job's stages; the caller holds the job's lease (see ``driver``)."""

    def __init__(
        self,
        settings: J2CSettings,
        journal: Journal,
        clients: Clients,
        log: Log,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.registry = journal.registry
        self.clients = clients
        self.log = log
        # Set (synchronously, on the loop) just before submitting: from then on a cancel goes to
        # the scheduler instead of interrupting this task.
        self.submitting = False

    @property
    def job_id(self) -> str:
        return self.journal.job_id

    async def run(self) -> None:
        record = await self.registry.get(self.job_id)
        if record.status.terminal:
            return
        handle = record.handle
        if handle is None and record.status == JobStatus.cancelling:
            await self.journal.status(JobStatus.cancelled, "cancelled before it was submitted")
            return
        resumed = handle is not None  # submitted before this process took the job over
        if handle is None:
            handle = await self._prepare_and_submit(record)
            if handle is None:
                return
        state = await self._watch(handle, resumed=resumed)
        await self._results(handle, state)

    # ------------------------------------------------------------------ stage records

    async def _started(self, stage: Stage, inputs: StageInputs, text: str) -> None:
        started = StageRecord(
            stage=stage, key=inputs.key, state=StageState.started, started_at=time.time()
        )

        def apply(record: JobRecord) -> None:
            record.stages[stage.value] = started

        await self.journal.stage(stage, StageState.started, text, change=apply)

    async def _finished(
        self,
        stage: Stage,
        inputs: StageInputs,
        state: str,
        text: str,
        output: dict[str, Any],
        *,
        data: dict[str, Any] | None = None,
        change: Callable[[JobRecord], None] | None = None,
    ) -> None:
        final = StageState(state)  # finished or reused

        def apply(record: JobRecord) -> None:
            now = time.time()
            before = record.stages.get(stage.value)
            started = before.started_at if before and before.state == StageState.started else now
            record.stages[stage.value] = StageRecord(
                stage=stage,
                key=inputs.key,
                state=final,
                started_at=started,
                finished_at=now,
                seconds=round(now - started, 3),
                reason=text,
                output={"inputs": inputs.parts, **output},
            )
            if change is not None:
                change(record)

        await self.journal.stage(stage, final, text, data=data, change=apply)

    # ------------------------------------------------------------------ scan → submit

    async def _prepare_and_submit(self, record: JobRecord) -> JobHandle | None:
        previous = await self.registry.previous(record)
        spec = pack_spec(self.settings, record)
        await self.journal.status(JobStatus.packing, "packing the project")
        result, packed_at = await self._scan_and_pack(record, spec, previous)
        await self.journal.status(JobStatus.uploading, "uploading layers")
        manifest, manifest_uri = await self._upload(record, result, packed_at, previous)
        job_spec = await self._configure(record, manifest, manifest_uri, previous)
        job_spec = await start_run(self.settings, self.journal, record, manifest, job_spec)
        try:
            handle = await self._submit(record, job_spec)
        except Exception:
            await abandon_run(self.settings, self.registry, self.job_id, JobStatus.failed)
            raise
        if handle is None:  # cancelled before it was submitted
            await abandon_run(self.settings, self.registry, self.job_id, JobStatus.cancelled)
        return handle

    async def _scan_and_pack(
        self, record: JobRecord, spec: PackSpec, previous: JobRecord | None
    ) -> tuple[PackResult, float]:
        scan_inputs = StageInputs(
            {
                "code_path": spec.code_path,
                "call_path": spec.call_path,
                "venv_path": spec.venv_path,
                "excludes": spec.excludes,
                "includes": spec.includes,
            }
        )
        await self._started(Stage.scan, scan_inputs, "scan: walking the project and the venv")
        # The send already walked the tree to decide on this job: pack from that walk.
        scan = self.clients.scans.pop(self.job_id, None)
        if scan is None or scan.spec != spec or not scan.fresh:
            scan = await self.clients.packers.scan(spec, layer_cache_dir(self.settings))
        plan = scan.report.plan
        refuse_if_over_limit(plan)
        files = sum(layer.files for layer in plan.layers)
        excluded = sum(group.count for group in plan.excluded)
        layers = " and ".join(f"{layer.role.value}" for layer in plan.layers)
        summary = f"scan: {_count(files, 'file')}, {_size(plan.total_bytes)} ({layers} layer"
        summary += "s)" if len(plan.layers) > 1 else ")"
        if excluded:
            summary += f"; {excluded} paths left out"
        for warning in plan.warnings:
            summary += f"; warning: {warning.message}"
        await self._finished(
            Stage.scan,
            scan_inputs,
            "finished",
            summary,
            {"files": files, "bytes": plan.total_bytes},
            data={"plan": plan.model_dump(mode="json")},
        )

        pack_inputs = StageInputs({"scan": scan_inputs.key, "level": spec.compression_level})
        await self._started(Stage.pack, pack_inputs, "pack: writing changed layers")
        async with (
            self.clients.pack_slots,
            self.journal.progress(Stage.pack, total_bytes=plan.total_bytes) as meter,
        ):
            result, packed_at = await self.clients.packers.pack(
                spec, layer_cache_dir(self.settings), _pack_progress(meter), scan
            )
        await self._pack_finished(pack_inputs, result, previous)
        return result, packed_at

    async def _pack_finished(
        self, inputs: StageInputs, result: PackResult, previous: JobRecord | None
    ) -> None:
        earlier = _layers_of(previous)
        lines: list[str] = []
        layers: list[dict[str, Any]] = []
        for packed in result.layers:
            layer = packed.layer
            role = layer.role.value
            before = earlier.get(layer.digest)
            since = before["since"] if before else None
            if packed.reused:
                origin = f"since job {since}" if since else "since an earlier pack"
                lines.append(f"{role} layer reused: unchanged {origin}")
            elif before:
                lines.append(f"{role} layer re-packed: same content as job {since}")
            else:
                changed = (
                    f"changed since job {previous.id}"
                    if previous is not None and previous.stages.get(Stage.pack.value)
                    else "first pack of this project"
                )
                lines.append(
                    f"{role} layer packed: {_count(layer.files, 'file')}, {_size(layer.size)} "
                    f"({changed})"
                )
            layers.append(
                {
                    "role": role,
                    "digest": layer.digest,
                    "size": layer.size,
                    "reused": packed.reused,
                    "since": since or self.job_id,
                }
            )
        all_reused = all(packed.reused for packed in result.layers)
        keyed = StageInputs({**inputs.values, "layers": [entry["digest"] for entry in layers]})
        await self._finished(
            Stage.pack,
            keyed,
            "reused" if all_reused else "finished",
            "; ".join(lines),
            {"layers": layers},
            data={"layers": layers, "seconds": round(result.seconds, 3)},
        )

    async def _upload(
        self, record: JobRecord, result: PackResult, packed_at: float, previous: JobRecord | None
    ) -> tuple[Manifest, str]:
        store = self.clients.store()
        # Dated by its layers, not by now: the same layers give the same manifest digest.
        manifest = make_manifest(
            result, source_image=job_image(self.settings, record), created_at=packed_at
        )
        inputs = StageInputs(
            {
                "layers": [packed.layer.digest for packed in result.layers],
                "manifest": manifest.digest(),
                "store": self.settings.storage_url(),
            }
        )
        total = sum(packed.layer.size for packed in result.layers)
        await self._started(Stage.upload, inputs, "upload: sending missing layers")
        async with self.journal.progress(Stage.upload, total_bytes=total) as meter:
            published = await publish(store, result, manifest, meter.bytes_callback())
        sent = published.bytes_uploaded
        if not published.uploaded and not published.manifest_uploaded:
            since = _since(previous, Stage.upload, inputs)
            text = "upload reused: layers and manifest already in the store" + (
                f" (since job {since})" if since else ""
            )
            state = "reused"
        else:
            sent_what = [f"{role.value} layer" for role in published.uploaded] or ["manifest"]
            text = f"uploaded {', '.join(sent_what)} ({_size(sent)})"
            if published.already_present:
                present = ", ".join(f"{role.value} layer" for role in published.already_present)
                text += f"; {present} already in the store"
            state = "finished"
        manifest_uri = published.manifest_uri

        def apply(job: JobRecord) -> None:
            job.manifest_uri = manifest_uri

        await self._finished(
            Stage.upload,
            inputs,
            state,
            text,
            {"manifest_uri": manifest_uri, "bytes_uploaded": sent},
            data={"bytes_uploaded": sent, "manifest_uri": manifest_uri},
            change=apply,
        )
        return manifest, manifest_uri

    async def _configure(
        self, record: JobRecord, manifest: Manifest, manifest_uri: str, previous: JobRecord | None
    ) -> JobSpec:
        request = record.request
        presign = self.settings.storage.presign_for_jobs
        inputs = StageInputs(
            {
                "manifest": manifest.digest(),
                "image": job_image(self.settings, record),
                "resources": request.resources.model_dump(mode="json"),
                "args": request.args,
                "env": request.env,
                "scheduler": record.scheduler,
                "presign": presign,
            }
        )
        await self._started(Stage.configure, inputs, "configure: building the job spec")
        store = self.clients.store()
        job_manifest = await self._presigned_manifest(store, manifest) if presign else manifest_uri
        spec = job_spec(self.settings, record, job_manifest, store)
        state, text = _explain_configure(inputs, previous)
        shown = spec.model_copy(
            update={
                "command": [redact_url(part) for part in spec.command],
                "env": mask_env(spec.env, self.settings.scheduler.pass_env),
            }
        )
        await self._finished(
            Stage.configure,
            inputs,
            state,
            text,
            {"spec": shown.model_dump(mode="json")},
            data={"image": spec.image, "command": shown.command},
        )
        return spec

    async def _presigned_manifest(self, store: ObjectStore, manifest: Manifest) -> str:
        """A per-job manifest whose layers carry presigned URLs, itself presigned: the job needs
        no storage credentials. Recorded and shown only redacted."""
        expiry = self.settings.storage.presign_expiry_s
        layers: list[Layer] = []
        for layer in manifest.layers:
            url = await store.presign(blob_key(layer.digest), expires_s=expiry)
            if url is None:
                raise ConfigError(
                    f"storage.presign_for_jobs is on but the {store.kind} store cannot presign "
                    "URLs",
                    field="storage.presign_for_jobs",
                )
            layers.append(layer.model_copy(update={"url": url}))
        resolved = manifest.model_copy(update={"layers": layers})
        key = f"jobs/{self.job_id}/manifest.json"
        await store.put_bytes(key, resolved.canonical_json())
        url = await store.presign(key, expires_s=expiry)
        assert url is not None  # the layers were presigned by the same store
        return url

    async def _submit(self, record: JobRecord, spec: JobSpec) -> JobHandle | None:
        inputs = StageInputs({"spec": spec.key, "configure": digest_of(spec.model_dump())})
        if (await self.registry.get(self.job_id)).status == JobStatus.cancelling:
            await self.journal.status(JobStatus.cancelled, "cancelled before it was submitted")
            return None
        self.submitting = True
        await self._started(Stage.submit, inputs, f"submit: sending the job to {record.scheduler}")
        scheduler = self.clients.scheduler(record.scheduler)
        handle = await until_available(
            lambda: scheduler.submit(spec), f"submit of {self.job_id}", self.log, attempts=6
        )

        def apply(job: JobRecord) -> None:
            job.handle = handle

        await self._finished(
            Stage.submit,
            inputs,
            "finished",
            f"submitted to {record.scheduler} as {handle.id}",
            {"handle": handle.model_dump(mode="json")},
            change=apply,
        )
        current = await self.journal.status(JobStatus.submitted, f"submitted as {handle.id}")
        if current.status == JobStatus.cancelling:  # asked while it was being submitted
            await scheduler.cancel(handle)
        return handle

    # ------------------------------------------------------------------ watch → results

    async def _watch(self, handle: JobHandle, *, resumed: bool) -> SchedulerState:
        inputs = StageInputs({"handle": handle.id})
        again = " again (the process that watched it stopped)" if resumed else ""
        await self._started(Stage.watch, inputs, f"watch: following {handle.id}{again}")
        scheduler = self.clients.scheduler(handle.scheduler)
        state = await Watcher(
            self.journal,
            scheduler,
            handle,
            current=lambda: self.registry.get(self.job_id),
            log=self.log,
        ).run()
        await self._finished(
            Stage.watch, inputs, "finished", f"watch: job ended ({state.status.value})", {}
        )
        return state

    async def _results(self, handle: JobHandle, state: SchedulerState) -> None:
        inputs = StageInputs({"handle": handle.id})
        await self._started(Stage.results, inputs, "results: collecting exit code and outputs")
        record = await self.registry.get(self.job_id)
        results = await self.clients.scheduler(handle.scheduler).results(handle)
        exit_code = state.exit_code if state.exit_code is not None else results.exit_code
        results = await collect_outputs(
            self.clients.store(),
            record,
            results.model_copy(update={"exit_code": exit_code}),
            uploaded=not self.settings.storage.presign_for_jobs,
            last_lines=await self.registry.last_log_lines(self.job_id, LAST_LINES),
        )
        final = state.status
        if record.status == JobStatus.cancelling and final == JobStatus.failed:
            final = JobStatus.cancelled  # the scheduler saw a signal we asked for
        results = await finish_run(self.settings, record, results, final)
        data: dict[str, Any] = {
            "exit_code": exit_code,
            "artifacts": len(results.artifacts),
            "output_uri": results.output_uri,
            "outputs_note": results.outputs_note,
            "tracking": results.tracking.url if results.tracking else None,
        }
        if final != JobStatus.succeeded:
            data["last_lines"] = await self.registry.last_log_lines(self.job_id, LAST_LINES)
        text = f"exit code {exit_code}" if exit_code is not None else final.value

        def apply(job: JobRecord) -> None:
            job.results = results
            job.exit_code = exit_code

        await self._finished(
            Stage.results, inputs, "finished", f"results: {text}", {}, change=apply
        )
        await self.journal.write([{"kind": EventKind.result, "text": text, "data": data}])
        await self.journal.status(final, state.message or text)


def _pack_progress(meter: ProgressMeter) -> Callable[[PackProgress], None]:
    """Turn the packer's per-layer cumulative progress into meter increments."""
    seen: dict[LayerRole, tuple[int, int]] = {}

    def report(progress: PackProgress) -> None:
        before = seen.get(progress.role, (0, 0))
        seen[progress.role] = (progress.bytes_done, progress.files_done)
        meter.add(progress.bytes_done - before[0], progress.files_done - before[1])

    return report


def _explain_configure(inputs: StageInputs, previous: JobRecord | None) -> tuple[str, str]:
    earlier = previous.stages.get(Stage.configure.value) if previous else None
    if previous is None or earlier is None:
        return "finished", "configure: job spec built"
    if earlier.key == inputs.key:
        return "reused", f"configure reused: unchanged since job {previous.id}"
    changed = ", ".join(inputs.changed_since(earlier))
    return "finished", f"configure re-run: {changed} changed since job {previous.id}"


def _layers_of(record: JobRecord | None) -> dict[str, dict[str, Any]]:
    if record is None or Stage.pack.value not in record.stages:
        return {}
    layers: list[dict[str, Any]] = record.stages[Stage.pack.value].output.get("layers", [])
    return {entry["digest"]: entry for entry in layers}


def _since(previous: JobRecord | None, stage: Stage, inputs: StageInputs) -> str | None:
    earlier = previous.stages.get(stage.value) if previous else None
    if previous is not None and earlier is not None and earlier.key == inputs.key:
        return previous.id
    return None
