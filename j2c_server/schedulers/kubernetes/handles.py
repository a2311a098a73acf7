"""What a Kubernetes :class:`JobHandle` holds, and the API paths it names.

A handle's ``data``: ``namespace``, the Job's ``uid`` (a Job of the same name made later is not
this one), ``nodes`` for a multi-node job, and for one variant of a sweep ``array`` (the Indexed
Job's name) and ``index``; its id is the Job's name, or ``<job>/<index>`` for a variant.
"""

from __future__ import annotations

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import SchedulerState
from j2c_server.wire.api import JobHandle, JobStatus

JSON_MERGE_PATCH = "application/merge-patch+json"
BACKGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


def namespace_of(handle: JobHandle) -> str:
    namespace = handle.data.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInput("handle: a Kubernetes job handle needs its namespace", field="handle")
    return namespace


def job_name_of(handle: JobHandle) -> str:
    """The Job's name: the handle's id, or a sweep variant's ``array``."""
    return str(handle.data.get("array") or handle.id)


def index_of(handle: JobHandle) -> int | None:
    """A sweep variant's index in its Indexed Job; None for a job of its own."""
    index = handle.data.get("index")
    return index if isinstance(index, int) and "array" in handle.data else None


def nodes_of(handle: JobHandle) -> int:
    return int(handle.data.get("nodes", 1))


def lost(handle: JobHandle) -> SchedulerState:
    return SchedulerState(
        status=JobStatus.lost,
        message=f"Job {job_name_of(handle)} no longer exists (deleted, or removed after "
        "ttlSecondsAfterFinished)",
    )


def jobs_url(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def pods_url(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def secrets_url(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets"


def services_url(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/services"
