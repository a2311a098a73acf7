"""The rendered Kubernetes Job passes the Pod Security Standards' "restricted" profile.

The check (``tests/support/pss.py``) is written from the policy's published controls and reads
the pod through the official client's models; no API server with Pod Security Admission runs
here. The renderings checked: a one-node Job, a multi-node Indexed Job, the dry run's document
(``native_spec``: what ``--dry-run`` prints), with the node cache's volume too.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from j2c_server.schedulers.kubernetes.backend import KubernetesScheduler
from j2c_server.schedulers.kubernetes.spec import render_job
from j2c_server.wire.api import Resources
from tests.schedulers.test_kube_multinode import official
from tests.schedulers.test_kubernetes import make_settings, make_spec
from tests.support.pss import read_pod_template, restricted_violations

pytest.importorskip("kubernetes")

EPHEMERAL = {
    "ephemeral": {
        "volumeClaimTemplate": {
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "50Gi"}},
            }
        }
    }
}


def _jobs() -> dict[str, dict[str, Any]]:
    single = render_job(make_spec(), make_settings())
    multi = render_job(make_spec(resources=Resources(nodes=3, gpus=2)), make_settings())
    dry_single = KubernetesScheduler.native_spec(make_spec(), make_settings())
    dry_multi = KubernetesScheduler.native_spec(
        make_spec(resources=Resources(nodes=2)), make_settings()
    )
    cached = render_job(make_spec(), make_settings(cache_volume=EPHEMERAL, service_account="ml"))
    assert dry_single is not None and dry_multi is not None
    [dry_multi_job] = [item for item in dry_multi["items"] if item["kind"] == "Job"]
    return {
        "single": single,
        "multi-node": multi,
        "dry run": dry_single,
        "dry run, multi-node": dry_multi_job,
        "cache volume, service account": cached,
    }


@pytest.mark.parametrize("which", list(_jobs()))
def test_the_rendered_job_passes_the_restricted_profile(which: str) -> None:
    job = _jobs()[which]
    assert official(job, "V1Job") == job  # every field is one the API knows, where it belongs
    assert restricted_violations(read_pod_template(job)) == []


def test_a_job_without_the_security_context_fails_the_four_controls() -> None:
    # The check is not vacuous: the Job as rendered before the security context fails exactly
    # the four restricted controls the issue found.
    job = copy.deepcopy(render_job(make_spec(), make_settings()))
    pod = job["spec"]["template"]["spec"]
    del pod["securityContext"]
    del pod["containers"][0]["securityContext"]
    assert sorted(restricted_violations(read_pod_template(job))) == [
        "Capabilities (restricted)",
        "Privilege Escalation",
        "Running as Non-root",
        "Seccomp (restricted)",
    ]


@pytest.mark.parametrize(
    ("change", "control"),
    [
        (lambda p, c: p.update(hostNetwork=True), "Host Namespaces"),
        (lambda p, c: c["securityContext"].update(privileged=True), "Privileged Containers"),
        (
            lambda p, c: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "HostPath Volumes",
        ),
        (
            lambda p, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "Capabilities (restricted)",
        ),
        (lambda p, c: p["securityContext"].update(runAsUser=0), "Running as Non-root user"),
        (lambda p, c: c["securityContext"].update(runAsNonRoot=False), "Running as Non-root"),
        (
            lambda p, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            "Seccomp (restricted)",
        ),
        (
            lambda p, c: c["securityContext"].update(allowPrivilegeEscalation=True),
            "Privilege Escalation",
        ),
        (lambda p, c: c.update(ports=[{"containerPort": 80, "hostPort": 80}]), "Host Ports"),
        (
            lambda p, c: p["securityContext"].update(
                sysctls=[{"name": "kernel.msgmax", "value": "1"}]
            ),
            "Sysctls",
        ),
    ],
)
def test_the_check_flags_each_control_it_reads(change: Any, control: str) -> None:
    job = copy.deepcopy(render_job(make_spec(), make_settings()))
    pod = job["spec"]["template"]["spec"]
    change(pod, pod["containers"][0])
    assert control in restricted_violations(read_pod_template(job))


def test_the_pod_runs_as_the_operators_uid_and_gid() -> None:
    job = render_job(make_spec(), make_settings(run_as_user=1234, run_as_group=5678, fs_group=None))
    context = job["spec"]["template"]["spec"]["securityContext"]
    assert context["runAsUser"] == 1234 and context["runAsGroup"] == 5678
    assert context["runAsNonRoot"] is True and "fsGroup" not in context


def test_uid_0_is_refused_in_the_settings() -> None:
    with pytest.raises(ValidationError, match="run_as_user"):
        make_settings(run_as_user=0)


def test_no_service_account_token_is_mounted_unless_one_is_named() -> None:
    plain = render_job(make_spec(), make_settings())["spec"]["template"]["spec"]
    assert plain["automountServiceAccountToken"] is False
    named = render_job(make_spec(), make_settings(service_account="ml-jobs"))
    pod = named["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ml-jobs"
    assert "automountServiceAccountToken" not in pod  # the account's own setting decides


def test_image_pull_policy_is_the_operators() -> None:
    default = render_job(make_spec(), make_settings())
    assert "imagePullPolicy" not in default["spec"]["template"]["spec"]["containers"][0]
    always = render_job(make_spec(), make_settings(image_pull_policy="Always"))
    assert always["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    with pytest.raises(ValidationError, match="image_pull_policy"):
        make_settings(image_pull_policy="Sometimes")
