"""A Pod Security Standards check, written from the published controls (Kubernetes docs,
"Pod Security Standards", profiles *baseline* and *restricted*, policy version latest).

The pod is read through the official ``kubernetes`` client's models, so a field the API server
would not know (a misspelt ``securityContext`` key) is dropped before the check and counts as
unset, as it would on a real cluster. Each violation names its control as the docs title it.
Containers are ``containers``, ``initContainers`` and ``ephemeralContainers`` alike.
"""

from __future__ import annotations

import json
from typing import Any

# Baseline: "Capabilities" — what may be added.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
# Baseline: "SELinux" — allowed types.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Baseline: "Sysctls" — the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
# Restricted: "Volume Types".
RESTRICTED_VOLUMES = {
    "config_map",
    "csi",
    "downward_api",
    "empty_dir",
    "ephemeral",
    "persistent_volume_claim",
    "projected",
    "secret",
}
_SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def read_pod_template(job: dict[str, Any]) -> Any:
    """The pod spec of a batch/v1 Job, as the official client's V1PodSpec."""
    import kubernetes

    class _Response:
        data = json.dumps(job)

    model = kubernetes.client.ApiClient().deserialize(_Response(), "V1Job")
    return model.spec.template.spec


def _containers(pod: Any) -> list[Any]:
    return [
        *(pod.containers or []),
        *(pod.init_containers or []),
        *(pod.ephemeral_containers or []),
    ]


def baseline_violations(pod: Any) -> list[str]:
    out: list[str] = []
    pod_ctx = pod.security_context
    containers = _containers(pod)
    ctxs = [(c.name, c.security_context) for c in containers]
    # HostProcess
    windows = [pod_ctx.windows_options if pod_ctx else None] + [
        ctx.windows_options if ctx else None for _, ctx in ctxs
    ]
    if any(w is not None and w.host_process for w in windows):
        out.append("HostProcess")
    # Host Namespaces
    if pod.host_network or pod.host_pid or pod.host_ipc:
        out.append("Host Namespaces")
    # Privileged Containers
    if any(ctx is not None and ctx.privileged for _, ctx in ctxs):
        out.append("Privileged Containers")
    # Capabilities (baseline)
    for _, ctx in ctxs:
        added = set(ctx.capabilities.add or []) if ctx and ctx.capabilities else set()
        if added - BASELINE_CAPABILITIES:
            out.append("Capabilities (baseline)")
            break
    # HostPath Volumes
    if any(v.host_path is not None for v in pod.volumes or []):
        out.append("HostPath Volumes")
    # Host Ports
    if any(p.host_port for c in containers for p in c.ports or []):
        out.append("Host Ports")
    # AppArmor
    profiles = [pod_ctx.app_armor_profile if pod_ctx else None] + [
        ctx.app_armor_profile if ctx else None for _, ctx in ctxs
    ]
    if any(p is not None and p.type not in _SECCOMP_OK for p in profiles):
        out.append("AppArmor")
    # SELinux
    options = [pod_ctx.se_linux_options if pod_ctx else None] + [
        ctx.se_linux_options if ctx else None for _, ctx in ctxs
    ]
    for opt in options:
        if opt is not None and ((opt.type or "") not in SELINUX_TYPES or opt.user or opt.role):
            out.append("SELinux")
            break
    # /proc Mount Type
    if any(ctx is not None and ctx.proc_mount not in (None, "Default") for _, ctx in ctxs):
        out.append("/proc Mount Type")
    # Seccomp (baseline): never Unconfined
    seccomp = [pod_ctx.seccomp_profile if pod_ctx else None] + [
        ctx.seccomp_profile if ctx else None for _, ctx in ctxs
    ]
    if any(s is not None and s.type == "Unconfined" for s in seccomp):
        out.append("Seccomp (baseline)")
    # Sysctls
    sysctls = (pod_ctx.sysctls or []) if pod_ctx else []
    if any(s.name not in SAFE_SYSCTLS for s in sysctls):
        out.append("Sysctls")
    return out


def restricted_violations(pod: Any) -> list[str]:
    """Every violated control of the restricted profile (which includes the baseline)."""
    out = baseline_violations(pod)
    pod_ctx = pod.security_context
    ctxs = [c.security_context for c in _containers(pod)]
    # Volume Types
    for volume in pod.volumes or []:
        kinds = {
            name
            for name in volume.attribute_map
            if name != "name" and getattr(volume, name) is not None
        }
        if kinds - RESTRICTED_VOLUMES:
            out.append("Volume Types")
            break
    # Privilege Escalation: must be set to false on every container.
    if any(ctx is None or ctx.allow_privilege_escalation is not False for ctx in ctxs):
        out.append("Privilege Escalation")
    # Running as Non-root: the pod's true (no container says false), or every container's true.
    pod_nonroot = bool(pod_ctx and pod_ctx.run_as_non_root)
    for ctx in ctxs:
        own = ctx.run_as_non_root if ctx else None
        if own is False or (own is None and not pod_nonroot):
            out.append("Running as Non-root")
            break
    # Running as Non-root user: runAsUser, where set, is not 0.
    users = [pod_ctx.run_as_user if pod_ctx else None] + [
        ctx.run_as_user if ctx else None for ctx in ctxs
    ]
    if any(uid == 0 for uid in users):
        out.append("Running as Non-root user")
    # Seccomp (restricted): RuntimeDefault or Localhost on the pod, or on every container.
    pod_profile = pod_ctx.seccomp_profile.type if pod_ctx and pod_ctx.seccomp_profile else None
    for ctx in ctxs:
        own = ctx.seccomp_profile.type if ctx and ctx.seccomp_profile else None
        if own not in _SECCOMP_OK and not (own is None and pod_profile in _SECCOMP_OK):
            out.append("Seccomp (restricted)")
            break
    # Capabilities (restricted): drop ALL; add only NET_BIND_SERVICE.
    for ctx in ctxs:
        caps = ctx.capabilities if ctx else None
        dropped = set(caps.drop or []) if caps else set()
        added = set(caps.add or []) if caps else set()
        if "ALL" not in dropped or added - {"NET_BIND_SERVICE"}:
            out.append("Capabilities (restricted)")
            break
    return out
