"""Reading a batch/v1 Job and its pods as j2c status, in words a user understands.

Pure functions over the API's JSON: the Job's conditions decide terminal states (Complete,
Failed with its reason such as DeadlineExceeded); while it runs, the Job's pod says why it is
still waiting (Unschedulable with the scheduler's message, image pull errors, crash loops) and,
once its container has terminated, the exit code.

**Interrupted** (a new attempt may resume the job, docs/pipeline.md): its pod was disrupted. The
Job's Failed condition names the ``DisruptionTarget`` pod condition (rule 0 of its
``podFailurePolicy``, spec.py: it stays on the Job after the evicted pod is deleted), or its
current pod (below) still carries that condition (its reason: ``PreemptionByScheduler``,
``EvictionByEvictionAPI``, ``DeletionByTaintManager``, ``TerminationByKubelet``...) or was
``Evicted`` by its kubelet. A deadline, an out-of-memory kill and the container's own exit code
are the job's.

Which pods are the Job's: in a namespace that tenants share, anyone who may create pods can make
one that carries the Job's labels, and the log, exit code and outputs digest j2c reads come from
the pod it takes for the Job's. So a pod is the Job's only when it names the Job, by its uid, as
its controlling owner (``ownerReferences`` with ``controller: true``) *and* carries the Job
controller's ``batch.kubernetes.io/controller-uid`` label (:func:`owned_pods`); and of those, the
Job's first pod stands for it until the Job controller replaced it, that is until it ended in a
way the Job retries (deleted, evicted or preempted: a ``DisruptionTarget``; or any failure when
``backoffLimit`` allows one) and a later one was made after that, before the Job finished
(:func:`current_pod`). A pod planted beside the running one is never read. Kubernetes
itself does not stop a user from writing those fields on a pod of their own: the admission
policy in docs/operators.md does (only the Job controller may create pods that claim a Job).
"""

from __future__ import annotations

from typing import Any

from j2c_server.core.units import timed_out
from j2c_server.schedulers.base import SchedulerState
from j2c_server.schedulers.kubernetes.spec import ANNOTATION_CANCELLED, CONTAINER_NAME
from j2c_server.wire.api import JobStatus

_IMAGE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
    }
)
_CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})


CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def owned_pods(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods of ``pods`` that the Job controls: its uid in their controller-uid label and as
    their controlling owner, oldest first."""
    uid = job["metadata"].get("uid")
    return sorted(
        (
            pod
            for pod in pods
            if uid
            and (pod["metadata"].get("labels") or {}).get(CONTROLLER_UID_LABEL) == uid
            and any(
                ref.get("controller") is True
                and ref.get("kind") == "Job"
                and ref.get("apiVersion", "").startswith("batch/")
                and ref.get("uid") == uid
                for ref in pod["metadata"].get("ownerReferences") or []
            )
        ),
        # RFC 3339 timestamps of one cluster compare correctly as strings.
        key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"].get("name", "")),
    )


def current_pod(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod that stands for the Job (``pods``: its own, oldest first): the first one, until
    the Job controller made a retry of it: it ended in a way the Job retries and the next one
    was created after that (in the same second or later: timestamps are whole seconds), before
    the Job finished."""
    chosen = pods[0] if pods else None
    finished = _finished_at(job) if job is not None else None
    retries = int(((job or {}).get("spec") or {}).get("backoffLimit") or 0) > 0
    for later in pods[1:]:
        assert chosen is not None
        ended = _retried_at(chosen, retries)
        created = str(later["metadata"].get("creationTimestamp", ""))
        if ended is None or created < ended or (finished is not None and created > finished):
            break
        chosen = later
    return chosen


def _retried_at(pod: dict[str, Any], retries: bool) -> str | None:
    """When ``pod`` ended in a way its Job makes a new pod for, or None: deleted, disrupted
    (evicted, preempted, its node lost), or failed at all when the Job has retries left
    (j2c's Jobs have ``backoffLimit: 0``: a failing program is not run twice)."""
    deleting = pod["metadata"].get("deletionTimestamp")
    if deleting:
        return str(deleting)
    if pod.get("status", {}).get("phase") != "Failed":
        return None
    if not retries and _condition(pod, "DisruptionTarget") is None:
        return None
    terminated = (container_status(pod).get("state") or {}).get("terminated") or {}
    return str(terminated.get("finishedAt") or pod["metadata"].get("creationTimestamp", ""))


def _finished_at(job: dict[str, Any]) -> str | None:
    """When the Job's Complete or Failed condition was set (None: it has not finished)."""
    for kind in ("Complete", "Failed"):
        cond = _condition(job, kind)
        if cond is not None:
            return str(cond.get("lastTransitionTime") or "")
    return None


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == CONTAINER_NAME), {})


def container_started(pod: dict[str, Any]) -> bool:
    """True once the container runs or ran: from then on its log can be read."""
    state = container_status(pod).get("state") or {}
    return "running" in state or "terminated" in state


def container_terminated(pod: dict[str, Any]) -> bool:
    return "terminated" in (container_status(pod).get("state") or {})


def exit_code(pod: dict[str, Any] | None) -> int | None:
    if pod is None:
        return None
    terminated = (container_status(pod).get("state") or {}).get("terminated")
    return int(terminated["exitCode"]) if terminated and "exitCode" in terminated else None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def disruption(job: dict[str, Any] | None, pod: dict[str, Any] | None) -> str | None:
    """Why the job's pod was disrupted (None: it was not, as far as the API tells)."""
    failed = _condition(job, "Failed") if job is not None else None
    if failed is not None and "DisruptionTarget" in str(failed.get("message") or ""):
        return f"its pod was disrupted ({failed.get('message')})"
    if pod is None:
        return None
    target = _condition(pod, "DisruptionTarget")
    if target is not None:
        return f"its pod was disrupted ({_words(target.get('reason'), target.get('message'))})"
    if pod.get("status", {}).get("reason") == "Evicted":
        return f"its pod was evicted ({pod['status'].get('message') or 'by its node'})"
    return None


def job_finished(job: dict[str, Any]) -> bool:
    return bool(_condition(job, "Complete") or _condition(job, "Failed"))


def failure_words(job: dict[str, Any]) -> str | None:
    """The reason and message of the Job's Failed condition (None: it has not failed)."""
    failed = _condition(job, "Failed")
    return None if failed is None else _words(failed.get("reason"), failed.get("message"))


def was_cancelled(job: dict[str, Any]) -> bool:
    return ANNOTATION_CANCELLED in (job.get("metadata", {}).get("annotations") or {})


def _words(reason: str | None, message: str | None) -> str:
    return f"{reason}: {message}" if reason and message else (reason or message or "")


def container_detail(pod: dict[str, Any]) -> str | None:
    """Why the container ended (OOMKilled, exit code), or why it does not run yet."""
    status = container_status(pod)
    state = status.get("state") or {}
    if "terminated" in state:
        term = state["terminated"]
        if term.get("reason") == "OOMKilled":
            return f"the container ran out of memory (OOMKilled, exit code {term.get('exitCode')})"
        return f"the container exited with code {term.get('exitCode')}" + (
            f" ({term['reason']})" if term.get("reason") else ""
        )
    waiting = state.get("waiting")
    if not waiting:
        return None
    reason, message = waiting.get("reason"), waiting.get("message")
    if reason in _IMAGE_REASONS:
        image = status.get("image") or "?"
        return f"cannot pull image {image} ({_words(reason, message)})"
    if reason == "CrashLoopBackOff":
        last = (status.get("lastState") or {}).get("terminated") or {}
        code = f" (last exit code {last['exitCode']})" if "exitCode" in last else ""
        return f"the container keeps crashing{code}: {_words(reason, message)}"
    if reason in _CONFIG_REASONS:
        return f"the container cannot be created ({_words(reason, message)})"
    if reason in ("ContainerCreating", "PodInitializing"):
        return "starting the container"
    return _words(reason, message) or None


def _pending_words(pod: dict[str, Any]) -> str:
    conditions = pod.get("status", {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("status") == "False":
        if scheduled.get("reason") == "Unschedulable":
            return f"no node can run it yet: {scheduled.get('message') or 'unschedulable'}"
        return _words(scheduled.get("reason"), scheduled.get("message"))
    if scheduled is None:
        return "waiting for the scheduler to place the pod"
    return container_detail(pod) or "starting the container"


def job_state(job: dict[str, Any], pods: list[dict[str, Any]]) -> SchedulerState:
    """The status of an existing Job (``pods``: its own, oldest first); a missing Job is the
    caller's decision (lost/cancelled)."""
    pod = current_pod(job, pods)
    code = exit_code(pod)
    detail = container_detail(pod) if pod is not None else None
    if _condition(job, "Complete"):
        return SchedulerState(status=JobStatus.succeeded, exit_code=0 if code is None else code)
    failed = _condition(job, "Failed")
    if failed:
        status = JobStatus.cancelled if was_cancelled(job) else JobStatus.failed
        words = _words(failed.get("reason"), failed.get("message"))
        deadline = job.get("spec", {}).get("activeDeadlineSeconds")
        if failed.get("reason") == "DeadlineExceeded" and isinstance(deadline, int):
            words = f"{timed_out(deadline / 60)} ({words})"  # the one wording of every backend
        message = "; ".join(w for w in (words, detail) if w) or None
        return SchedulerState(
            status=status,
            message=message,
            exit_code=code,
            interrupted=disruption(job, pod) if status == JobStatus.failed else None,
            node=_node(pod),
        )
    if was_cancelled(job):
        return SchedulerState(status=JobStatus.cancelling, message="the Job is being deleted")
    if job.get("spec", {}).get("suspend"):
        return SchedulerState(
            status=JobStatus.queued, message="waiting for admission (the Job is suspended)"
        )
    return pod_state(pod)


def pod_state(pod: dict[str, Any] | None) -> SchedulerState:
    """What one pod of a Job that is still going says: why it waits, that it runs, or how its
    container ended before the Job controller wrote its verdict."""
    if pod is None:
        return SchedulerState(
            status=JobStatus.submitted, message="waiting for the Job controller to create a pod"
        )
    code = exit_code(pod)
    detail = container_detail(pod)
    phase = pod.get("status", {}).get("phase", "Pending")
    if phase == "Pending":
        return SchedulerState(status=JobStatus.queued, message=_pending_words(pod))
    if phase == "Succeeded":  # the Job controller has not written its condition yet
        return SchedulerState(status=JobStatus.succeeded, exit_code=0 if code is None else code)
    if phase == "Failed":
        reason = _words(pod["status"].get("reason"), pod["status"].get("message"))
        message = "; ".join(w for w in (reason, detail) if w) or None
        return SchedulerState(
            status=JobStatus.failed,
            message=message,
            exit_code=code,
            interrupted=disruption(None, pod),
            node=_node(pod),
        )
    if phase == "Unknown":
        return SchedulerState(
            status=JobStatus.running, message="the pod's node does not report (Unknown)"
        )
    waiting = "waiting" in (container_status(pod).get("state") or {})
    return SchedulerState(status=JobStatus.running, message=detail if waiting else None)


def _node(pod: dict[str, Any] | None) -> str | None:
    node = (pod or {}).get("spec", {}).get("nodeName")
    return str(node) if node else None
