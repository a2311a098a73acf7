"""The staged pipeline: scan → pack → upload → configure → submit → watch → results.

Every stage is idempotent and keyed by a hash of its inputs, stored with its output in
``JobRecord.stages``. A job that is resumed (after a restart) goes straight to watching once it
was submitted; before that, its stages run again and find their work already done (layers by
fingerprint, blobs by digest). Each stage is compared with the same stage of the project's
previous job; the event's data says what was reused (and from which job) and why anything ran
again, and :mod:`.stage_text` turns that data into the event's words.

Packing, hashing and compressing run in niced worker processes (:mod:`.pack_worker`), at most
``settings.pack.max_concurrent_packs`` at a time.

A run that a preemption or a lost node ended is followed by the job's next attempt, from the
same manifest, submitted and watched here again until one ends for good (:mod:`.attempts`);
the results stage reads the last one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.image.base_layer import add_base_layers, refuse_if_it_breaks_the_image
from j2c_server.image.check import InventoryLearner
from j2c_server.jobs.children import ChildJobs, Family
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.attempts import Attempts, attempts_allowed, next_pending
from j2c_server.jobs.drive.watch import Log, Watcher, until_available
from j2c_server.jobs.failure import job_failure
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.results import INDEX_DIGEST_MARK, collect_outputs, digest_mark
from j2c_server.jobs.send.inputs import (
    job_image,
    job_spec,
    layer_cache_dir,
    line_tag_of,
    pack_spec,
    presigned_manifest,
    record_image_report,
    record_needs,
    refuse_if_over_limit,
    refuse_missing_imports,
    runner_check,
    shown_spec,
)
from j2c_server.jobs.send.preflight import with_warning
from j2c_server.jobs.send.presigned_outputs import outputs_policy, told_to_upload
from j2c_server.jobs.send.stage_keys import (
    StageInputs,
    configure_changes,
    digest_of,
    pack_outcome,
    upload_outcome,
)
from j2c_server.jobs.stage_text import describe
from j2c_server.jobs.tracking import abandon_run, finish_run, start_run
from j2c_server.pack import PackResult, PackSpec, make_manifest, publish
from j2c_server.pack.held import hold, release
from j2c_server.schedulers.base import JobSpec, SchedulerState
from j2c_server.usage.writer import job_submitted
from j2c_server.wire.api import (
    AttemptRecord,
    EventKind,
    JobHandle,
    JobRecord,
    JobStatus,
    Stage,
    StageRecord,
    StageState,
)
from j2c_server.wire.manifest import Manifest

LAST_LINES = 20
FAILURE_EVENTS = 400  # the last events a failed job's reason is read from (jobs/failure.py)


class Pipeline:
    """Runs one job's stages; the caller holds the job's lease (see ``driver``)."""

    def __init__(
        self,
        settings: J2CSettings,
        journal: Journal,
        clients: Clients,
        log: Log,
        children: ChildJobs,
        family: Family,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.registry = journal.registry
        self.clients = clients
        self.log = log
        self.children = children  # a parent's children: the one hook (jobs/children.py)
        self.family = family
        # Set (synchronously, on the loop) just before submitting: from then on a cancel goes to
        # the scheduler instead of interrupting this task.
        self.submitting = False
        self.attempts = Attempts(settings, journal, clients, log, self._submit)

    @property
    def job_id(self) -> str:
        return self.journal.job_id

    async def run(self) -> None:
        record = await self.registry.jobs.get(self.job_id)
        if record.status.terminal:
            return
        handle = record.handle
        if handle is None and record.status == JobStatus.cancelling:
            await self.journal.status(JobStatus.cancelled, "cancelled before it was submitted")
            return
        resumed = handle is not None  # submitted before this process took the job over
        if handle is not None:
            # A cancel now goes to the scheduler, never "before it was submitted".
            self.submitting = True
            if record.status == JobStatus.cancelling:
                # The process that recorded the cancel may have died before it reached the
                # scheduler: ask again (a cancel is idempotent), then watch the job end.
                await self.clients.scheduler(handle.scheduler).cancel(handle)
        if handle is None and record.is_child():
            return  # a sweep's variant: its parent submits it
        if handle is None:
            handle = await self._prepare_and_submit(record)
            if handle is None:
                return
        following: JobHandle | SchedulerState | None = handle
        if resumed and next_pending(record):  # taken over between two attempts
            following = await self.attempts.start(record, handle)
        state = SchedulerState(status=JobStatus.lost)
        while isinstance(following, JobHandle):
            handle = following
            state = await self._watch(handle, resumed=resumed)
            resumed = False
            following = await self.attempts.after(handle, state)
        if isinstance(following, SchedulerState):  # the job ends another way than it said
            state = following
        await self._results(handle, state)

    # ------------------------------------------------------------------ stage records

    async def _started(
        self, stage: Stage, inputs: StageInputs, data: dict[str, Any] | None = None
    ) -> None:
        text = describe(stage, StageState.started, data or {})
        started = StageRecord(
            stage=stage, key=inputs.key, state=StageState.started, started_at=time.time()
        )

        def apply(record: JobRecord) -> None:
            record.stages[stage.value] = started

        await self.journal.stage(stage, StageState.started, text, data=data, change=apply)

    async def _finished(
        self,
        stage: Stage,
        inputs: StageInputs,
        final: StageState,
        output: dict[str, Any],
        data: dict[str, Any],
        *,
        change: Callable[[JobRecord], None] | None = None,
    ) -> None:
        text = describe(stage, final, data)

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
        previous = await self.registry.jobs.previous(record)
        spec = pack_spec(self.settings, record)
        await self.journal.status(JobStatus.packing, "packing the project")
        cache_dir = layer_cache_dir(self.settings)
        try:
            result, packed_at = await self._scan_and_pack(record, spec, previous)
            await self.journal.status(JobStatus.uploading, "uploading layers")
            manifest, manifest_uri = await self._upload(record, result, packed_at, previous)
        finally:
            await asyncio.to_thread(release, cache_dir, self.job_id)
        if record.is_parent():  # one upload, then every child pinned to it
            await self.children.run(self.family, self.journal, record, manifest, manifest_uri)
            return None
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
        await self._started(Stage.scan, scan_inputs)
        # The send already walked the tree to decide on this job: pack from that walk.
        scan = self.clients.scans.pop(self.job_id, None)
        if scan is None or scan.spec != spec or not scan.fresh:
            scan = await self.clients.packers.scan(spec, layer_cache_dir(self.settings))
        plan = scan.report.plan
        refuse_if_over_limit(plan)
        # Before any upload: what the target lacks, said with the scan's notes.
        report = await record_image_report(self.settings, record)
        refuse_missing_imports(report, record.request)
        plan = plan.model_copy(update={"image_report": report})
        plan = with_warning(plan, await runner_check(self.settings, record, report))
        shipping = report.shipping if report is not None else None
        # A target not known yet: the job checks what it needs before its entry point.
        needs = await record_needs(self.settings, record, report)
        # Before anything is packed or uploaded.
        refuse_if_it_breaks_the_image(shipping, plan.total_bytes, spec.hard_limit_bytes)
        files = sum(layer.files for layer in plan.layers)
        await self._finished(
            Stage.scan,
            scan_inputs,
            StageState.finished,
            {"files": files, "bytes": plan.total_bytes},
            {
                "files": files,
                "bytes": plan.total_bytes,
                "layers": [layer.role.value for layer in plan.layers],
                "excluded": sum(group.count for group in plan.excluded),
                "warnings": [warning.message for warning in plan.warnings],
                "plan": plan.model_dump(mode="json"),
            },
        )

        pack_inputs = StageInputs({"scan": scan_inputs.key, "level": spec.compression_level})
        await self._started(Stage.pack, pack_inputs)
        async with (
            self.clients.pack_slots,
            self.journal.progress(Stage.pack, total_bytes=plan.total_bytes) as meter,
        ):
            result, packed_at = await self.clients.packers.pack(
                spec, layer_cache_dir(self.settings), meter.pack_callback(), scan
            )
            # The lab-base packages the image lacks: their own layer (image/base_layer.py).
            result = await asyncio.to_thread(
                add_base_layers, result, shipping, spec, layer_cache_dir(self.settings)
            )
            result = result.model_copy(update={"needs": needs})
            # Still in the pack slot: no other pack of this server evicts them meanwhile.
            result = await asyncio.to_thread(
                hold, result, layer_cache_dir(self.settings), self.job_id
            )
        await self._pack_finished(pack_inputs, result, previous)
        return result, packed_at

    async def _pack_finished(
        self, inputs: StageInputs, result: PackResult, previous: JobRecord | None
    ) -> None:
        facts, layers = pack_outcome(result, previous, self.job_id)
        # Big files are their own blobs (pack/packer.py): named when packed again.
        big_files = [
            {"path": packed.file.path, "size": packed.file.size}
            for packed in result.files
            if not packed.reused
        ]
        all_reused = all(p.reused for p in result.layers) and all(f.reused for f in result.files)
        keyed = StageInputs({**inputs.values, "layers": [entry["digest"] for entry in layers]})
        await self._finished(
            Stage.pack,
            keyed,
            StageState.reused if all_reused else StageState.finished,
            {"layers": layers},
            {"layers": facts, "big_files": big_files, "seconds": round(result.seconds, 3)},
        )

    async def _upload(
        self, record: JobRecord, result: PackResult, packed_at: float, previous: JobRecord | None
    ) -> tuple[Manifest, str]:
        store = self.clients.store()
        # Dated by its layers, not by now: the same layers give the same manifest digest.
        manifest = make_manifest(
            result, source_image=job_image(self.settings, record), created_at=packed_at
        )
        if record.is_parent():  # the children's rows go into the one manifest
            parent = await self.registry.jobs.get(self.job_id)
            manifest = await self.children.prepare(self.family, parent, manifest)
        inputs = StageInputs(
            {
                "layers": [packed.layer.digest for packed in result.layers],
                "manifest": manifest.digest(),
                "store": self.settings.storage_url(),
            }
        )
        total = sum(packed.layer.size for packed in result.layers)
        await self._started(Stage.upload, inputs)
        async with self.journal.progress(Stage.upload, total_bytes=total) as meter:
            published = await publish(store, result, manifest, meter.bytes_callback())
        state, facts = upload_outcome(published, previous, inputs)
        manifest_uri = published.manifest_uri

        def apply(job: JobRecord) -> None:
            job.manifest_uri = manifest_uri

        await self._finished(
            Stage.upload,
            inputs,
            state,
            {"manifest_uri": manifest_uri, "bytes_uploaded": published.bytes_uploaded},
            facts,
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
        await self._started(Stage.configure, inputs)
        store = self.clients.store()
        job_manifest, pinned = (
            await presigned_manifest(self.settings, store, manifest, self.job_id)
            if presign
            else (manifest_uri, manifest.digest())
        )
        post = await outputs_policy(self.settings, store, record) if presign else None
        spec = job_spec(
            self.settings, record, job_manifest, store, manifest_digest=pinned, outputs_post=post
        )
        state, changes = configure_changes(inputs, previous)
        shown = shown_spec(spec, self.settings)
        await self._finished(
            Stage.configure,
            inputs,
            state,
            {"spec": shown},
            {**changes, "image": spec.image, "command": shown["command"]},
        )
        return spec

    async def _submit(self, record: JobRecord, spec: JobSpec) -> JobHandle | None:
        inputs = StageInputs({"spec": spec.key, "configure": digest_of(spec.model_dump())})
        if (await self.registry.jobs.get(self.job_id)).status == JobStatus.cancelling:
            if spec.attempt == 1:  # a later attempt's end is the results stage's to write
                await self.journal.status(JobStatus.cancelled, "cancelled before it was submitted")
            return None
        self.submitting = True
        await self._started(Stage.submit, inputs, {"scheduler": record.scheduler})
        scheduler = self.clients.scheduler(record.scheduler)
        handle = await until_available(
            lambda: scheduler.submit(spec), f"submit of {self.job_id}", self.log, attempts=6
        )

        allowed = record.attempts_allowed or attempts_allowed(self.settings, record)

        def apply(job: JobRecord) -> None:
            job.handle = handle
            job.attempts_allowed = allowed
            if not job.attempts or job.attempts[-1].number != spec.attempt:
                job.attempts.append(AttemptRecord(number=spec.attempt))
            job.attempts[-1].scheduler_job_id = handle.id
            job.attempts[-1].submitted_at = time.time()

        data = {"scheduler": record.scheduler, "scheduler_job_id": handle.id}
        await self._finished(
            Stage.submit,
            inputs,
            StageState.finished,
            {"handle": handle.model_dump(mode="json")},
            {**data, "attempt": spec.attempt} if spec.attempt > 1 else data,
            change=apply,
        )
        words = f"submitted as {handle.id}"
        if spec.attempt > 1:
            words = f"attempt {spec.attempt} of {allowed} {words}"
        current = await self.journal.status(JobStatus.submitted, words)
        if spec.attempt == 1:  # the start of its usage record (one per job)
            job_submitted(self.settings, self.clients.store(), current, self.log)
        if current.status == JobStatus.cancelling:  # asked while it was being submitted
            await scheduler.cancel(handle)
        return handle

    # ------------------------------------------------------------------ watch → results

    async def _watch(self, handle: JobHandle, *, resumed: bool) -> SchedulerState:
        inputs = StageInputs({"handle": handle.id})
        facts = {"scheduler_job_id": handle.id, "resumed": resumed}
        await self._started(Stage.watch, inputs, facts)
        scheduler = self.clients.scheduler(handle.scheduler)
        record = await self.registry.jobs.get(self.job_id)
        learner = InventoryLearner(
            self.settings, record.scheduler, job_image(self.settings, record), handle
        )
        state = await Watcher(
            self.journal,
            scheduler,
            handle,
            current=lambda: self.registry.jobs.state(self.job_id),
            log=self.log,
            tag=line_tag_of(record),
            inventory=learner,
        ).run()
        await self._finished(
            Stage.watch, inputs, StageState.finished, {}, {"status": state.status.value}
        )
        return state

    async def _j2c_lines_with(self, mark: str) -> list[str]:
        """j2c's last line in the job's log that holds ``mark`` ([] when none): what j2c-unpack
        said, never a line the job printed."""
        line = await self.registry.events.last_log_line_with(self.job_id, mark, j2c_only=True)
        return [line] if line is not None else []

    async def _results(self, handle: JobHandle, state: SchedulerState) -> None:
        inputs = StageInputs({"handle": handle.id})
        await self._started(Stage.results, inputs)
        record = await self.registry.jobs.get(self.job_id)
        results = await self.clients.scheduler(handle.scheduler).results(handle)
        exit_code = state.exit_code if state.exit_code is not None else results.exit_code
        results = await collect_outputs(
            self.clients.store(),
            record,
            results.model_copy(update={"exit_code": exit_code}),
            uploaded=not self.settings.storage.presign_for_jobs or told_to_upload(record),
            last_lines=await self.registry.events.last_log_lines(self.job_id, LAST_LINES),
            digest_lines=await self._j2c_lines_with(INDEX_DIGEST_MARK),
            rank_lines={  # a multi-node job's other ranks upload their own (unpack/outputs.py)
                rank: next(iter(await self._j2c_lines_with(digest_mark(rank))), None)
                for rank in range(1, record.request.resources.nodes)
            },
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
            data["last_lines"] = await self.registry.events.last_log_lines(self.job_id, LAST_LINES)
        text = f"exit code {exit_code}" if exit_code is not None else final.value
        failure = None
        if final == JobStatus.failed:
            events, _ = await self.registry.events.read(
                self.job_id,
                after=max(0, (await self.registry.jobs.get(self.job_id)).last_seq - FAILURE_EVENTS),
            )
            failure = job_failure(record, exit_code, events)
            data["failure"] = failure.model_dump(mode="json", exclude_none=True)

        def apply(job: JobRecord) -> None:
            job.results = results
            job.exit_code = exit_code
            job.failure = failure

        await self._finished(
            Stage.results,
            inputs,
            StageState.finished,
            {},
            {"exit_code": exit_code, "status": final.value},
            change=apply,
        )
        await self.journal.write([{"kind": EventKind.result, "text": text, "data": data}])
        ended = {"failure": data["failure"], "exit_code": exit_code} if failure else None
        await self.journal.status(final, state.message or text, data=ended)
