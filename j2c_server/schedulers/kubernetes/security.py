"""The security context of every j2c pod: what the Pod Security Standards' "restricted" profile
asks for, so a namespace that enforces it admits j2c's Jobs.

Pod level: ``runAsNonRoot``, ``runAsUser`` / ``runAsGroup`` / ``fsGroup`` from the operator's
settings (``scheduler.kubernetes.run_as_user`` ...), ``seccompProfile: RuntimeDefault``, and no
service-account token mounted unless the operator named a service account (a job needs no API
access: the store is reached by presigned URLs or the operator's Secret). Container level:
``allowPrivilegeEscalation: false`` and every capability dropped (a setuid binary in the image
gets none back). These are guardrails, not isolation: a namespace's admission (PSA ``enforce:
restricted``, a ValidatingAdmissionPolicy) is what holds against a user who writes their own
manifests with the server's token — docs/operators.md, "Security model".
"""

from __future__ import annotations

from typing import Any

from j2c_server.schedulers.kubernetes.settings import KubernetesSettings


def pod_security(kube: KubernetesSettings) -> dict[str, Any]:
    """The pod's ``securityContext``."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": kube.run_as_user,
        "runAsGroup": kube.run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if kube.fs_group is not None:
        # Volumes (the node cache's ephemeral claim) become writable by the job's group.
        context["fsGroup"] = kube.fs_group
    return context


def container_security() -> dict[str, Any]:
    """The container's ``securityContext``."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        # Set here too: a policy that reads containers alone (some Kyverno rules) sees it.
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def harden(kube: KubernetesSettings, pod: dict[str, Any], container: dict[str, Any]) -> None:
    """Apply both contexts, the token rule and the image pull policy to a rendered pod."""
    pod["securityContext"] = pod_security(kube)
    container["securityContext"] = container_security()
    # The API server mounts the namespace's default service account's token otherwise: a job
    # that prints its files would hand it out. A named account is the operator's choice.
    if not kube.service_account:
        pod["automountServiceAccountToken"] = False
    if kube.image_pull_policy:
        container["imagePullPolicy"] = kube.image_pull_policy
