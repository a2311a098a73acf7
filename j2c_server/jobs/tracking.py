"""A job's MLflow run: created before the job is submitted, closed and read when it ends.

With a tracking URI (``mlflow.tracking_uri``, else the lab's ``MLFLOW_TRACKING_URI``), j2c talks
to the tracking server's REST API itself (httpx; the server has no ``mlflow`` dependency):

- before submit (:func:`start_run`): the experiment (``mlflow.experiment``, default the project
  folder's name) found by name or created, a run created in it, tagged ``j2c.job_id``,
  ``j2c.project``, ``j2c.image``, ``j2c.scheduler``, ``j2c.code_digest``, ``j2c.venv_digest``,
  ``j2c.attempt`` and ``mlflow.source.git.commit`` when the project is a git checkout. A job
  resumed after a preemption keeps its one run: each attempt gets the same ``MLFLOW_RUN_ID``
  and sets ``j2c.attempt`` (and ``j2c.resumed_from``) on it (:func:`tag_attempt`), so its
  metrics go on by step where the checkpoint left them. The job gets
  ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_ID`` and ``MLFLOW_RUN_ID`` (so the user's
  ``mlflow.start_run()`` continues that run) plus the ``mlflow.pass_env`` variables of this
  server — never a credential: those are refused by the settings, a URI's userinfo is dropped,
  and the server's own ``MLFLOW_TRACKING_TOKEN`` / ``_USERNAME`` / ``_PASSWORD`` are used only
  for j2c's calls. The run is recorded in ``results.tracking`` at once, so a process that takes
  the job over finds it.
- when the job ends (:func:`finish_run`): a run still RUNNING is closed with the job's status
  (FINISHED, FAILED, KILLED), and a failed or cancelled job's run is FAILED / KILLED even when
  it says FINISHED (``mlflow`` ends an open run FINISHED at exit, whatever the exit code); its
  status, latest metrics and artifact URI go into the results.

A tracking server that is down or refuses never stops a job: it runs without the variables, and
a warning line of j2c's (phase ``tracking``: ``MLflow: ...``) says why in its log.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import PurePath
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from j2c_server.config import J2CSettings, MlflowSettings
from j2c_server.core.job_env import split_env
from j2c_server.core.process_output import output_within
from j2c_server.jobs.journal import Journal
from j2c_server.registry.job_registry import Registry
from j2c_server.schedulers.base import JobSpec
from j2c_server.wire.api import (
    AttemptRecord,
    EventKind,
    JobRecord,
    JobResults,
    JobStatus,
    LineLevel,
    LineOrigin,
    TrackingRun,
)
from j2c_server.wire.manifest import LayerRole, Manifest

API = "/api/2.0/mlflow"
_GIT_TIMEOUT_S = 5.0
_OPEN = ("RUNNING", "SCHEDULED")
_ENDED_BADLY = ("FAILED", "KILLED")


class TrackingFailure(Exception):
    """The tracking server could not be reached or refused; the message says which and why."""


def _public_uri(uri: str) -> str:
    """The URI without userinfo: what a job and a link may show."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri.rstrip("/")
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)).rstrip("/")


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    return f"{_public_uri(uri)}/#/experiments/{quote(experiment_id)}/runs/{quote(run_id)}"


class MlflowClient:
    """The few REST calls j2c makes, with the server's own credentials (never a job's)."""

    def __init__(self, uri: str, cfg: MlflowSettings) -> None:
        parts = urlsplit(uri)
        auth: httpx.Auth | None = None
        headers: dict[str, str] = {}
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif user and password:
            auth = httpx.BasicAuth(user, password)
        insecure = os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true"
        self.uri = _public_uri(uri)
        self._client = httpx.AsyncClient(
            base_url=self.uri + API,
            auth=auth,
            headers=headers,
            timeout=cfg.timeout_s,
            verify=not insecure,
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def call(
        self, method: str, path: str, *, allow: tuple[str, ...] = (), **kwargs: Any
    ) -> dict[str, Any]:
        """The JSON answer; an MLflow error whose code is in ``allow`` comes back as
        ``{"error_code": ...}``, any other failure raises TrackingFailure."""
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise TrackingFailure(f"{self.uri} cannot be reached: {reason}") from None
        try:
            body: dict[str, Any] = response.json()
        except ValueError:
            body = {}
        if response.is_success:
            return body
        code = str(body.get("error_code") or "")
        if code and code in allow:
            return {"error_code": code}
        message = str(body.get("message") or response.text[:200] or response.reason_phrase)
        raise TrackingFailure(
            f"{self.uri} refused {path} (HTTP {response.status_code} {code}): {message}"
        )

    async def experiment_id(self, name: str) -> str:
        for _ in range(2):  # created by someone else in between: found the second time
            found = await self.call(
                "GET",
                "/experiments/get-by-name",
                params={"experiment_name": name},
                allow=("RESOURCE_DOES_NOT_EXIST",),
            )
            if "experiment" in found:
                return str(found["experiment"]["experiment_id"])
            made = await self.call(
                "POST",
                "/experiments/create",
                json={"name": name},
                allow=("RESOURCE_ALREADY_EXISTS",),
            )
            if "experiment_id" in made:
                return str(made["experiment_id"])
        raise TrackingFailure(f"{self.uri}: experiment {name!r} could be neither found nor made")

    async def create_run(
        self, experiment_id: str, name: str, tags: dict[str, str]
    ) -> dict[str, Any]:
        body = await self.call(
            "POST",
            "/runs/create",
            json={
                "experiment_id": experiment_id,
                "run_name": name,
                "start_time": int(time.time() * 1000),
                "tags": [{"key": key, "value": value} for key, value in tags.items()],
            },
        )
        info: dict[str, Any] = body["run"]["info"]
        return info

    async def get_run(self, run_id: str) -> dict[str, Any]:
        body = await self.call("GET", "/runs/get", params={"run_id": run_id})
        run: dict[str, Any] = body["run"]
        return run

    async def update_run(self, run_id: str, status: str) -> None:
        await self.call(
            "POST",
            "/runs/update",
            json={"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)},
        )


async def _git_commit(folder: str) -> str | None:
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            folder,
            "rev-parse",
            "HEAD",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        output = await output_within(process, _GIT_TIMEOUT_S)
    except OSError:
        return None
    if output is None:
        return None
    commit = output[0].decode().strip()
    return commit if process.returncode == 0 and len(commit) == 40 else None


def project_name(record: JobRecord) -> str:
    return PurePath(record.request.code_path).name


def experiment_name(settings: J2CSettings, record: JobRecord) -> str:
    return settings.mlflow.experiment or project_name(record)


async def _tags(record: JobRecord, manifest: Manifest, spec: JobSpec) -> dict[str, str]:
    tags = {
        "j2c.job_id": record.id,
        "j2c.project": project_name(record),
        "j2c.scheduler": record.scheduler,
        "j2c.manifest_digest": manifest.digest(),
        "j2c.attempt": str(record.attempt),
        "mlflow.runName": record.name,
    }
    if spec.image:
        tags["j2c.image"] = spec.image
    for role in LayerRole:
        layer = manifest.layer(role)
        if layer is not None:
            tags[f"j2c.{role.value}_digest"] = layer.digest
    parts = manifest.code_layers()
    if len(parts) > 1:  # a code layer in parts: the digest above is its first part's
        tags["j2c.code_parts"] = str(len(parts))
        tags["j2c.code_digest"] = (
            "parts:" + hashlib.sha256(",".join(part.digest for part in parts).encode()).hexdigest()
        )
    commit = await _git_commit(record.request.code_path)
    if commit:
        tags["mlflow.source.git.commit"] = commit
    return tags


TRACKING_PHASE = "tracking"  # the phase of j2c's lines about the job's MLflow run


async def _warn(journal: Journal, text: str, seconds: float) -> None:
    await journal.write(
        [
            {
                "kind": EventKind.log,
                "origin": LineOrigin.j2c,
                "level": LineLevel.warning,
                "phase": TRACKING_PHASE,
                "text": f"MLflow: {text}; the job runs without tracking",
                "data": {"warning": "tracking", "seconds": round(seconds, 3)},
            }
        ]
    )


async def tracking_uri(settings: J2CSettings, journal: Journal) -> str | None:
    """The tracking server's URI, or None when MLflow is not configured or its URI is no
    http(s) server (then with a warning in the job's log)."""
    uri = settings.mlflow.uri()
    if not uri:
        return None
    if urlsplit(uri).scheme not in ("http", "https"):
        # A local store (file:, sqlite:) is this machine's: a job elsewhere cannot log to it.
        await _warn(journal, f"{_public_uri(uri)} is not an http(s) tracking server", 0.0)
        return None
    return uri


async def start_run(
    settings: J2CSettings, journal: Journal, record: JobRecord, manifest: Manifest, spec: JobSpec
) -> JobSpec:
    """``spec`` with the run's variables, once the run exists; ``spec`` unchanged when MLflow
    is not configured or cannot be reached (then with a warning in the job's log)."""
    uri = await tracking_uri(settings, journal)
    if uri is None:
        return spec
    started = time.monotonic()
    tracking = record.results.tracking if record.results is not None else None
    if tracking is None:
        client = MlflowClient(uri, settings.mlflow)
        try:
            experiment = await client.experiment_id(experiment_name(settings, record))
            info = await client.create_run(
                experiment, record.name, await _tags(record, manifest, spec)
            )
        except (TrackingFailure, KeyError, TypeError) as exc:
            await _warn(journal, str(exc), time.monotonic() - started)
            return spec
        finally:
            await client.close()
        tracking = TrackingRun(
            run_id=str(info["run_id"]),
            experiment_id=experiment,
            url=run_url(uri, experiment, str(info["run_id"])),
            status=str(info.get("status") or "RUNNING"),
            artifact_uri=info.get("artifact_uri"),
        )
        recorded = tracking

        def apply(job: JobRecord) -> None:
            job.results = (job.results or JobResults()).model_copy(update={"tracking": recorded})

        await journal.write(
            [
                {
                    "kind": EventKind.log,
                    "origin": LineOrigin.j2c,
                    "level": LineLevel.info,
                    "phase": TRACKING_PHASE,
                    "text": f"MLflow run {tracking.run_id}: {tracking.url}",
                    "data": {
                        "tracking": tracking.model_dump(mode="json"),
                        "seconds": round(time.monotonic() - started, 3),
                    },
                }
            ],
            change=apply,
        )
    passed = {name: os.environ[name] for name in settings.mlflow.pass_env if os.environ.get(name)}
    plain, secret = split_env(passed)  # a value that looks like a credential: by reference
    env = {
        **spec.env,
        **plain,
        "MLFLOW_TRACKING_URI": _public_uri(uri),
        "MLFLOW_EXPERIMENT_ID": tracking.experiment_id,
        "MLFLOW_RUN_ID": tracking.run_id,
    }
    return spec.model_copy(update={"env": env, "secret_env": {**spec.secret_env, **secret}})


async def tag_attempt(settings: J2CSettings, record: JobRecord, attempt: AttemptRecord) -> None:
    """A resumed job's run says which attempt writes to it now (``j2c.attempt``) and where it
    resumed from (``j2c.resumed_from``): one run per job, its metrics continuing by step."""
    tracking = record.results.tracking if record.results is not None else None
    uri = settings.mlflow.uri()
    if tracking is None or not uri:
        return
    tags = {"j2c.attempt": str(attempt.number)}
    if attempt.resumed_from:
        tags["j2c.resumed_from"] = attempt.resumed_from
    client = MlflowClient(uri, settings.mlflow)
    try:
        for key, value in tags.items():
            await client.call(
                "POST",
                "/runs/set-tag",
                json={"run_id": tracking.run_id, "key": key, "value": value},
            )
    finally:
        await client.close()


def _closing_status(status: str, final: JobStatus) -> str | None:
    """The status to give the run at the job's end, or None to leave it. A job's failure wins
    over FINISHED: ``mlflow``'s exit hook ends an open run FINISHED whatever the exit code."""
    if final == JobStatus.succeeded:
        return "FINISHED" if status in _OPEN else None
    if status in _ENDED_BADLY:
        return None
    return "KILLED" if final == JobStatus.cancelled else "FAILED"


async def finish_run(
    settings: J2CSettings, record: JobRecord, results: JobResults, final: JobStatus
) -> JobResults:
    """``results`` with the job's run: closed with the job's status if the job left it open,
    then read back (status, latest metrics, artifact URI). A run that cannot be read or closed
    keeps what is known, with the reason in ``tracking.error``."""
    tracking = record.results.tracking if record.results is not None else None
    uri = settings.mlflow.uri()
    if tracking is None:
        return results
    if not uri:
        return results.model_copy(update={"tracking": tracking})
    client = MlflowClient(uri, settings.mlflow)
    try:
        run = await client.get_run(tracking.run_id)
        wanted = _closing_status(str(run["info"].get("status") or ""), final)
        if wanted is not None:
            await client.update_run(tracking.run_id, wanted)
            run = await client.get_run(tracking.run_id)
        metrics = {
            str(item["key"]): float(item["value"])
            for item in (run.get("data") or {}).get("metrics") or []
        }
        tracking = tracking.model_copy(
            update={
                "status": run["info"].get("status"),
                "artifact_uri": run["info"].get("artifact_uri") or tracking.artifact_uri,
                "metrics": metrics,
                "error": None,
            }
        )
    except (TrackingFailure, KeyError, TypeError, ValueError) as exc:
        tracking = tracking.model_copy(update={"error": str(exc)})
    finally:
        await client.close()
    return results.model_copy(update={"tracking": tracking})


async def abandon_run(
    settings: J2CSettings, registry: Registry, job_id: str, final: JobStatus
) -> None:
    """Close the run of a job that never reached its scheduler (submit refused, or cancelled
    first), so it does not stay RUNNING; best effort, nothing raised."""
    uri = settings.mlflow.uri()
    if not uri:
        return
    record = await registry.jobs.get(job_id)
    tracking = record.results.tracking if record.results is not None else None
    if tracking is None:
        return
    client = MlflowClient(uri, settings.mlflow)
    try:
        await client.update_run(
            tracking.run_id, "KILLED" if final == JobStatus.cancelled else "FAILED"
        )
    except TrackingFailure:
        pass
    finally:
        await client.close()
