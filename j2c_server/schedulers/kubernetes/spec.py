"""The batch/v1 Job manifest j2c creates for one :class:`JobSpec` (pure: no I/O, no cluster).

``render_job`` is what the Kubernetes backend POSTs and what ``j2c submit --scheduler kubernetes
--dry-run`` prints. Names and labels are derived from the request's idempotency key, so the same
request always maps to the same Job and a retried create can recognise its own Job.

A job on N nodes is an Indexed Job (``completions = parallelism = N``, one pod per rank, the
rank in ``JOB_COMPLETION_INDEX``), whose pods are spread over N nodes (required pod
anti-affinity), and which fails as a whole as soon as one pod fails (``backoffLimit: 0`` and a
``podFailurePolicy`` that fails the Job on any non-zero exit). Every Job's ``podFailurePolicy``
starts with :data:`DISRUPTION_RULE`: a disrupted pod fails the Job with a condition that says
so. Its pods' hostnames (``<job>-<index>``) resolve under a headless Service of the Job's name
(``render_service``), so ``MASTER_ADDR`` is ``<job>-0.<job>``, a name that exists before rank
0's pod has an IP.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError, InvalidInput
from j2c_server.schedulers.base import (
    JobSpec,
    not_a_memory_size,
    not_a_size_setting,
    required_image,
)
from j2c_server.schedulers.job_secrets import job_secrets
from j2c_server.schedulers.kubernetes.security import harden
from j2c_server.schedulers.kubernetes.settings import KubernetesSettings
from j2c_server.schedulers.unpack_cache import CACHE_ENV, CACHE_MAX_ENV, tenant_name

CONTAINER_NAME = "j2c"
LABEL_JOB_ID = "j2c.io/job-id"
LABEL_KEY = "j2c.io/key"
LABEL_USER = "j2c.io/user"
ANNOTATION_KEY = "j2c.io/key"
ANNOTATION_NAME = "j2c.io/name"
ANNOTATION_CANCELLED = "j2c.io/cancelled"
MASTER_PORT = 29500
CACHE_MOUNT = "/j2c/cache"
# Rule 0 of every Job's podFailurePolicy: a pod ended by a disruption (the DisruptionTarget
# condition: PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager,
# TerminationByKubelet...) fails the Job at once, its Failed condition naming the condition.
# Not Ignore, which would have the controller start the same pod again: j2c's next attempt
# restores the job's checkpoint and counts attempts itself (docs/kubernetes.md).
DISRUPTION_RULE: dict[str, Any] = {
    "action": "FailJob",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}
CACHE_VOLUME = "j2c-cache"

_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# Lower-case SI suffixes users type ("8g") mean what the upper-case ones mean to Kubernetes,
# where a lower-case "m" would be milli.
_SUFFIX_CASE = {"m": "M", "g": "G", "t": "T", "p": "P", "e": "E"}


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def job_name(key: str) -> str:
    """``j2c-<20 hex digits>``: DNS-1123 safe, short enough for pod names derived from it."""
    return "j2c-" + key_digest(key)[:20]


def label_value(text: str) -> str:
    """``text`` squeezed into a label value: allowed characters, at most 63, alphanumeric ends."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return value.strip("._-")


def memory_quantity(memory: str) -> str | None:
    """'16Gi', '8G', '8g', '512MB' → a Kubernetes quantity; None when it is not a size."""
    value = memory.strip()
    if value[-1:] in ("B", "b") and len(value) > 1 and not value[-2].isdigit():
        value = value[:-1]
    if value[-1:] in _SUFFIX_CASE:
        value = value[:-1] + _SUFFIX_CASE[value[-1]]
    return value if _QUANTITY_RE.match(value) else None


def cpu_quantity(cpus: float) -> str:
    return str(int(cpus)) if float(cpus).is_integer() else f"{round(cpus * 1000)}m"


def _resources(spec: JobSpec, settings: J2CSettings) -> dict[str, Any]:
    kube = settings.scheduler.section("kubernetes", KubernetesSettings)
    limits: dict[str, str] = {}
    if spec.resources.cpus is not None:
        limits["cpu"] = cpu_quantity(spec.resources.cpus)
    if spec.resources.memory is not None:
        memory = memory_quantity(spec.resources.memory)
        if memory is None:
            raise not_a_memory_size(spec.resources.memory)
        limits["memory"] = memory
    if spec.resources.gpus:
        limits[kube.gpu_resource] = str(spec.resources.gpus)
    # Requests equal limits: GPUs require it, and CPU/memory then get the Guaranteed QoS class
    # (Kubernetes would default the requests to the limits anyway).
    return {"limits": limits, "requests": dict(limits)} if limits else {}


def _node_selector(spec: JobSpec, settings: J2CSettings) -> dict[str, str]:
    kube = settings.scheduler.section("kubernetes", KubernetesSettings)
    selector = dict(kube.node_selector)
    gpu_type = spec.resources.gpu_type
    if gpu_type:
        if not _LABEL_VALUE_RE.match(gpu_type):
            raise InvalidInput(
                f"resources.gpu_type: {gpu_type!r} cannot be a node label value (letters, digits, "
                "'-', '_', '.', at most 63)",
                field="resources.gpu_type",
            )
        selector[kube.gpu_type_label] = gpu_type
    return selector


def _env(spec: JobSpec) -> list[dict[str, Any]]:
    """The container's env: values that are not credentials as they are; credentials (the
    operator's pass_env, the outputs policy, a presigned manifest: ``secret_env``, and anything
    whose name or value says it is one) by reference to the job's own Secret
    (:func:`render_secret`): whoever may read Jobs in the namespace reads a Job's env."""
    env, secret = job_secrets(spec)
    if spec.resources.nodes > 1:
        name = job_name(spec.key)
        env.setdefault("MASTER_ADDR", f"{name}-0.{name}")
        env.setdefault("MASTER_PORT", str(MASTER_PORT))
    items: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    for name in secret:
        ref = {"name": job_name(spec.key), "key": name}
        items.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return sorted(items, key=lambda item: str(item["name"]))


def render_secret(
    spec: JobSpec, settings: J2CSettings, *, namespace: str | None = None
) -> dict[str, Any] | None:
    """The job's own Secret (named as its Job, owned by it once the Job exists) with the values
    its env takes by reference; None when it has none."""
    _, secret = job_secrets(spec)
    if not secret:
        return None
    kube = settings.scheduler.section("kubernetes", KubernetesSettings)
    metadata: dict[str, Any] = {
        "name": job_name(spec.key),
        "labels": _labels(spec),
        "annotations": {ANNOTATION_KEY: spec.key},
    }
    namespace = namespace or kube.namespace
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": secret,
    }


def _multi_node(spec: JobSpec, job_spec: dict[str, Any], pod: dict[str, Any]) -> None:
    """An Indexed Job of one pod per rank, on distinct nodes, failing with its first rank."""
    nodes = spec.resources.nodes
    job_spec.update(
        completionMode="Indexed",
        completions=nodes,
        parallelism=nodes,
        # One rank failing ends the Job at once (and the controller stops the other pods):
        # alone, the others would wait for it forever. backoffLimitPerIndex would let the other
        # indexes run on, which is the opposite.
        podFailurePolicy={
            "rules": [
                DISRUPTION_RULE,
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER_NAME,
                        "operator": "NotIn",
                        "values": [0],
                    },
                },
            ]
        },
    )
    pod["subdomain"] = job_name(spec.key)
    pod["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {LABEL_KEY: key_digest(spec.key)[:63]}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def render_service(
    spec: JobSpec, settings: J2CSettings, *, owner_uid: str, namespace: str | None = None
) -> dict[str, Any]:
    """The headless Service that gives a multi-node Job's pods their DNS names; owned by the
    Job, so deleting the Job takes it along."""
    kube = settings.scheduler.section("kubernetes", KubernetesSettings)
    name = job_name(spec.key)
    metadata: dict[str, Any] = {
        "name": name,
        "labels": _labels(spec),
        "annotations": {ANNOTATION_KEY: spec.key},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": owner_uid}
        ],
    }
    namespace = namespace or kube.namespace
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            # Rank 0's name resolves as soon as its pod has an IP, not once it is ready.
            "publishNotReadyAddresses": True,
            "selector": {LABEL_KEY: key_digest(spec.key)[:63]},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def _deadline(spec: JobSpec, settings: J2CSettings) -> int | None:
    """The request's time limit, capped by the operator's ``active_deadline_seconds``."""
    cap = settings.scheduler.section("kubernetes", KubernetesSettings).active_deadline_seconds
    minutes = spec.resources.time_limit_minutes
    wanted = minutes * 60 if minutes is not None else None
    candidates = [v for v in (wanted, cap) if v is not None]
    return min(candidates) if candidates else None


def _labels(spec: JobSpec) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/managed-by": "j2c",
        LABEL_JOB_ID: label_value(spec.job_id),
        LABEL_KEY: key_digest(spec.key)[:63],
    }
    if spec.user and label_value(spec.user):
        labels[LABEL_USER] = label_value(spec.user)
    return labels


def _cache_volume(kube: KubernetesSettings, pod: dict[str, Any], container: dict[str, Any]) -> None:
    """The operator's cache volume: only this user's folder in it (``subPath``), at /j2c/cache.
    A pod of another user, who shares the pods' uid, never sees this user's entries, so it
    cannot change them (docs/operators.md's admission policy keeps every pod to its own
    ``subPath``)."""
    if kube.cache_volume is None:
        return
    if "hostPath" in kube.cache_volume and not kube.cache_allow_host_path:
        raise ConfigError(
            "scheduler.kubernetes.cache_volume: a hostPath volume fails the Pod Security "
            "Standards (baseline and restricted) and gives jobs a folder of the node",
            field="scheduler.kubernetes.cache_volume",
            hint="use a node-local ephemeral or CSI volume, or set cache_allow_host_path: true",
        )
    pod.setdefault("volumes", []).append({"name": CACHE_VOLUME, **kube.cache_volume})
    container.setdefault("volumeMounts", []).append(
        {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "subPath": tenant_name()}
    )
    env = [{"name": CACHE_ENV, "value": CACHE_MOUNT}]
    if kube.cache_max:
        env.append({"name": CACHE_MAX_ENV, "value": kube.cache_max})
    names = {item["name"] for item in env}
    container["env"] = [e for e in container["env"] if e["name"] not in names] + env


def render_job(
    spec: JobSpec, settings: J2CSettings, *, namespace: str | None = None
) -> dict[str, Any]:
    """The Job manifest (batch/v1, as JSON-ready dicts) that submitting ``spec`` creates."""
    kube = settings.scheduler.section("kubernetes", KubernetesSettings)
    labels = _labels(spec)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": required_image(spec, settings),
        "command": list(spec.command),
        "env": _env(spec),
        "resources": _resources(spec, settings),
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if kube.env_from_secret:
        container["envFrom"] = [{"secretRef": {"name": kube.env_from_secret}}]
    if kube.service_account:
        pod["serviceAccountName"] = kube.service_account
    selector = _node_selector(spec, settings)
    if selector:
        pod["nodeSelector"] = selector
    if kube.tolerations:
        pod["tolerations"] = [dict(t) for t in kube.tolerations]
    if kube.shm_size:
        # PyTorch DataLoader workers share tensors through /dev/shm; the runtime's 64 MiB default
        # makes them crash with "bus error".
        size = memory_quantity(kube.shm_size)
        if size is None:
            raise not_a_size_setting("scheduler.kubernetes.shm_size", kube.shm_size, "8Gi")
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}]
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    _cache_volume(kube, pod, container)
    harden(kube, pod, container)
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        # A disrupted pod (preempted, evicted, its node lost) fails the Job with a condition
        # that says so, even once the pod is gone: j2c then resumes the job (status.py).
        "podFailurePolicy": {"rules": [DISRUPTION_RULE]},
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    if kube.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = kube.ttl_seconds_after_finished
    deadline = _deadline(spec, settings)
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    if spec.resources.nodes > 1:
        _multi_node(spec, job_spec, pod)
    metadata: dict[str, Any] = {
        "name": job_name(spec.key),
        "labels": labels,
        "annotations": {ANNOTATION_KEY: spec.key, ANNOTATION_NAME: spec.name},
    }
    namespace = namespace or kube.namespace
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
