"""How the Kubernetes backend connects: kubeconfig (token, client certificate, CA, contexts,
exec plugins) and the in-cluster service account, against the fake API server over real TLS.

The fake (``tests/support/fake_kube.py``) stands in for a real API server, which cannot run
here; it verifies bearer tokens and client certificates the way a real one does.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.kubernetes.auth import load_connection
from j2c_server.schedulers.kubernetes.backend import KubernetesScheduler
from tests.support.fake_kube import CLIENT_USER, GOOD_TOKEN, FakeKube, make_tls, write_kubeconfig

SPEC = JobSpec(key="k", job_id="j-1", name="n", image="img:1", command=["true"])


def settings(**kube: Any) -> J2CSettings:
    return J2CSettings.model_validate({"scheduler": {"kubernetes": kube}})


async def submit_with(kube_settings: J2CSettings, **kwargs: Any) -> dict[str, Any]:
    async with KubernetesScheduler(kube_settings, **{"environ": {}, **kwargs}) as kube:
        handle = await kube.submit(SPEC)
    return handle.data


def identities(fake: FakeKube) -> list[str]:
    return [who for _, _, who in fake.requests]


# --------------------------------------------------------------------------- kubeconfig


async def test_kubeconfig_token_is_sent_as_bearer(fake_kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube)
    await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert identities(fake_kube) == [f"token:{GOOD_TOKEN}"]


async def test_client_certificate_files_authenticate(fake_kube: FakeKube, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "alice.crt").write_bytes(fake_kube.tls.client_cert)
    (certs / "alice.key").write_bytes(fake_kube.tls.client_key)
    # Relative paths are relative to the kubeconfig file, as kubectl reads them.
    user = {"client-certificate": "certs/alice.crt", "client-key": "certs/alice.key"}
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube, user=user)
    await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert identities(fake_kube) == [f"cert:{CLIENT_USER}"]


async def test_client_certificate_data_authenticates(fake_kube: FakeKube, tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(fake_kube.tls.client_cert).decode(),
        "client-key-data": base64.b64encode(fake_kube.tls.client_key).decode(),
    }
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube, user=user)
    await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert identities(fake_kube) == [f"cert:{CLIENT_USER}"]


async def test_a_server_outside_the_kubeconfigs_ca_is_refused(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    other_ca = make_tls("someone-elses-ca").ca
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube, ca=other_ca)
    with pytest.raises(SchedulerError) as caught:
        await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert not isinstance(caught.value, SchedulerUnavailable)  # retrying cannot help
    assert "does not verify" in str(caught.value) and "certificate authority" in str(caught.value)
    assert fake_kube.requests == []


def two_contexts(fake: FakeKube, path: Path) -> Path:
    write_kubeconfig(path, fake)
    config = yaml.safe_load(path.read_text())
    config["contexts"].append(
        {"name": "ml", "context": {"cluster": "fake", "user": "tester", "namespace": "ml"}}
    )
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_context_setting_picks_a_context_and_its_namespace(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = two_contexts(fake_kube, tmp_path / "config")
    data = await submit_with(settings(kubeconfig=str(kubeconfig), context="ml"))
    assert data["namespace"] == "ml"


def test_the_namespace_setting_beats_the_contexts(fake_kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig = two_contexts(fake_kube, tmp_path / "config")
    conn = load_connection(kubeconfig=str(kubeconfig), context="ml", namespace="team-a", environ={})
    assert conn.namespace == "team-a"


def test_an_unknown_context_lists_the_known_ones(fake_kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig = two_contexts(fake_kube, tmp_path / "config")
    with pytest.raises(ConfigError) as caught:
        load_connection(kubeconfig=str(kubeconfig), context="prod", namespace=None, environ={})
    assert caught.value.field == "scheduler.kubernetes.context"
    assert "known: fake, ml" in str(caught.value)


async def test_the_kubeconfig_list_is_merged_first_definition_first(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    full = yaml.safe_load(write_kubeconfig(tmp_path / "full", fake_kube).read_text())
    first = {"current-context": "fake", "contexts": full["contexts"], "users": full["users"]}
    second = {
        "current-context": "elsewhere",
        "clusters": full["clusters"],
        "users": [{"name": "tester", "user": {"token": "shadowed"}}],
    }
    (tmp_path / "a").write_text(yaml.safe_dump(first))
    (tmp_path / "b").write_text(yaml.safe_dump(second))
    listed = f"{tmp_path / 'missing'}:{tmp_path / 'a'}:{tmp_path / 'b'}"
    await submit_with(settings(), environ={"KUBECONFIG": listed})
    assert identities(fake_kube) == [f"token:{GOOD_TOKEN}"]


def test_a_missing_kubeconfig_file_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_connection(kubeconfig=str(tmp_path / "nope"), context=None, namespace=None, environ={})
    assert caught.value.field == "scheduler.kubernetes.kubeconfig"


def test_no_kubeconfig_outside_a_cluster_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_connection(
            kubeconfig=None, context=None, namespace=None, environ={"HOME": str(tmp_path)}
        )
    assert "no Kubernetes connection" in str(caught.value)


def test_a_legacy_auth_provider_points_to_exec_plugins(fake_kube: FakeKube, tmp_path: Path) -> None:
    user = {"auth-provider": {"name": "gcp", "config": {}}}
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube, user=user)
    with pytest.raises(ConfigError) as caught:
        load_connection(kubeconfig=str(kubeconfig), context=None, namespace=None, environ={})
    assert caught.value.hint is not None and "exec credential plugin" in caught.value.hint


# --------------------------------------------------------------------------- exec plugins

PLUGIN = """\
import json, os, pathlib, sys
record = pathlib.Path(sys.argv[1])
runs = json.loads(record.read_text()) if record.exists() else []
runs.append({"info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
             "setting": os.environ.get("PLUGIN_SETTING")})
record.write_text(json.dumps(runs))
tokens = sys.argv[3].split(",")
status = {"token": tokens[min(len(runs), len(tokens)) - 1], "expirationTimestamp": sys.argv[2]}
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def exec_kubeconfig(
    fake: FakeKube, tmp_path: Path, *, expires_in: float, tokens: list[str]
) -> tuple[Path, Path]:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    record = tmp_path / "runs.json"
    expiry = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=expires_in)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [
                str(script),
                str(record),
                expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
                ",".join(tokens),
            ],
            "env": [{"name": "PLUGIN_SETTING", "value": "from-kubeconfig"}],
            "interactiveMode": "Never",
        }
    }
    return write_kubeconfig(tmp_path / "config", fake, user=user), record


async def test_exec_plugin_token_is_used_and_kept_until_it_expires(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    kubeconfig, record = exec_kubeconfig(fake_kube, tmp_path, expires_in=3600, tokens=[GOOD_TOKEN])
    async with KubernetesScheduler(settings(kubeconfig=str(kubeconfig)), environ={}) as kube:
        handle = await kube.submit(SPEC)
        await kube.status(handle)
    runs = json.loads(record.read_text())
    assert len(runs) == 1
    assert runs[0]["info"]["kind"] == "ExecCredential"
    assert runs[0]["setting"] == "from-kubeconfig"
    assert set(identities(fake_kube)) == {f"token:{GOOD_TOKEN}"}


async def test_exec_plugin_runs_again_once_its_token_expired(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    kubeconfig, record = exec_kubeconfig(fake_kube, tmp_path, expires_in=-1, tokens=[GOOD_TOKEN])
    async with KubernetesScheduler(settings(kubeconfig=str(kubeconfig)), environ={}) as kube:
        handle = await kube.submit(SPEC)
        await kube.status(handle)
    assert len(json.loads(record.read_text())) == 3  # submit: 1 request; status: 2


async def test_a_rejected_exec_token_is_renewed_once(fake_kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig, record = exec_kubeconfig(
        fake_kube, tmp_path, expires_in=3600, tokens=["revoked", GOOD_TOKEN]
    )
    await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert len(json.loads(record.read_text())) == 2
    assert identities(fake_kube) == ["", f"token:{GOOD_TOKEN}"]


async def test_a_missing_exec_plugin_shows_its_install_hint(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    user = {
        "exec": {
            "command": "gke-gcloud-auth-plugin-not-installed",
            "installHint": "install gke-gcloud-auth-plugin",
        }
    }
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube, user=user)
    with pytest.raises(ConfigError) as caught:
        await submit_with(settings(kubeconfig=str(kubeconfig)))
    assert caught.value.hint == "install gke-gcloud-auth-plugin"
    assert "gke-gcloud-auth-plugin-not-installed" in str(caught.value)


# --------------------------------------------------------------------------- in cluster


def service_account(fake: FakeKube, tmp_path: Path, token: str) -> tuple[Path, dict[str, str]]:
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "token").write_text(token)
    (sa_dir / "ca.crt").write_bytes(fake.tls.ca)
    (sa_dir / "namespace").write_text("ml\n")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(fake.port)}
    return sa_dir, environ


async def test_in_cluster_uses_the_service_accounts_token_ca_and_namespace(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    sa_dir, environ = service_account(fake_kube, tmp_path, GOOD_TOKEN)
    data = await submit_with(settings(), environ=environ, service_account_dir=sa_dir)
    assert data["namespace"] == "ml"
    assert identities(fake_kube) == [f"token:{GOOD_TOKEN}"]


async def test_in_cluster_token_is_read_again_after_rotation(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    sa_dir, environ = service_account(fake_kube, tmp_path, "first-token")
    fake_kube.tokens = {"first-token"}
    async with KubernetesScheduler(settings(), environ=environ, service_account_dir=sa_dir) as kube:
        handle = await kube.submit(SPEC)
        # The kubelet rotates the projected token; the server stops accepting the old one.
        (sa_dir / "token").write_text("rotated-token-2")
        fake_kube.tokens = {"rotated-token-2"}
        await kube.status(handle)
    assert identities(fake_kube)[0] == "token:first-token"
    assert identities(fake_kube)[-1] == "token:rotated-token-2"
