"""How j2c reaches a Kubernetes API server: kubeconfig or in-cluster service account.

``load_connection`` (synchronous: it reads files; callers run it in a worker thread) resolves, in
this order: ``scheduler.kubernetes.kubeconfig``, ``$KUBECONFIG`` (a list of files, merged with
the first definition of a name winning, as kubectl does), ``~/.kube/config``, and finally the
pod's own service account when ``KUBERNETES_SERVICE_HOST`` is set. The result carries the server
URL, the namespace, a TLS context (CA, client certificate) and a bearer-token source.

The bearer-token sources it picks (a static token, a token file, an ``exec`` plugin) are in
:mod:`.tokens`.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.kubernetes.tokens import (
    BearerAuth,
    ExecPlugin,
    StaticToken,
    TokenFile,
    TokenSource,
)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_SETTING = "scheduler.kubernetes.kubeconfig"


@dataclass
class KubeConnection:
    server: str
    namespace: str
    verify: ssl.SSLContext | bool
    auth: TokenSource | None
    source: str = ""  # where it came from, for messages

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.server,
            verify=self.verify,
            auth=BearerAuth(self.auth) if self.auth is not None else None,
            timeout=httpx.Timeout(30.0, connect=10.0),
            headers={"Accept": "application/json", "User-Agent": "j2c"},
        )


# --------------------------------------------------------------------------- loading


def load_connection(
    *,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    environ: Mapping[str, str],
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> KubeConnection:
    """Resolve the connection from settings and the environment (see the module docstring)."""
    paths = _kubeconfig_paths(kubeconfig, environ)
    if paths:
        return _from_kubeconfig(paths, context, namespace)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster(environ, service_account_dir, namespace)
    raise ConfigError(
        "no Kubernetes connection: no kubeconfig found and not running inside a cluster",
        field=_SETTING,
        hint="set scheduler.kubernetes.kubeconfig or $KUBECONFIG",
    )


def _kubeconfig_paths(kubeconfig: str | None, environ: Mapping[str, str]) -> list[Path]:
    if kubeconfig:
        paths = [Path(p).expanduser() for p in kubeconfig.split(os.pathsep) if p]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise ConfigError(f"{_SETTING}: {missing[0]} does not exist", field=_SETTING)
        return paths
    listed = environ.get("KUBECONFIG")
    if listed:
        # kubectl skips entries of $KUBECONFIG that do not exist; so do we, unless none does.
        paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        found = [p for p in paths if p.is_file()]
        if not found:
            raise ConfigError(f"$KUBECONFIG names no existing file ({listed})", field=_SETTING)
        return found
    home = environ.get("HOME")
    default = Path(home) / ".kube" / "config" if home else None
    return [default] if default is not None and default.is_file() else []


def _in_cluster(environ: Mapping[str, str], sa_dir: Path, namespace: str | None) -> KubeConnection:
    host = environ["KUBERNETES_SERVICE_HOST"]
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    token_path = sa_dir / "token"
    if not token_path.is_file():
        raise ConfigError(
            f"running in a cluster but the service account token {token_path} is missing",
            field=_SETTING,
            hint="set automountServiceAccountToken: true on the lab's pod, or use a kubeconfig",
        )
    ca_path = sa_dir / "ca.crt"
    verify = ssl.create_default_context(cafile=str(ca_path)) if ca_path.is_file() else True
    ns_path = sa_dir / "namespace"
    own_ns = ns_path.read_text().strip() if ns_path.is_file() else None
    return KubeConnection(
        server=f"https://{host}:{port}",
        namespace=namespace or own_ns or "default",
        verify=verify,
        auth=TokenFile(token_path),
        source="the pod's service account",
    )


@dataclass
class _Entry:
    """One named cluster/user/context of a kubeconfig and the folder its paths are relative to."""

    body: dict[str, Any]
    base: Path


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"kubeconfig {path} cannot be read: {exc}", field=_SETTING) from None
    if not isinstance(data, dict):
        raise ConfigError(f"kubeconfig {path} must hold a mapping", field=_SETTING)
    return data


def _from_kubeconfig(
    paths: list[Path], context: str | None, namespace: str | None
) -> KubeConnection:
    sections: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for path in paths:
        data = _read_kubeconfig(path)
        current = current or data.get("current-context") or None
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in data.get(section) or []:
                if isinstance(item, dict) and item.get("name") not in sections[section]:
                    body = item.get(inner) or {}
                    sections[section][str(item["name"])] = _Entry(body, path.parent)
    where = os.pathsep.join(str(p) for p in paths)
    name = context or current
    if not name:
        raise ConfigError(
            f"kubeconfig {where} has no current-context",
            field="scheduler.kubernetes.context",
            hint="set scheduler.kubernetes.context",
        )
    ctx = sections["contexts"].get(name)
    if ctx is None:
        known = ", ".join(sorted(sections["contexts"])) or "none"
        raise ConfigError(
            f"kubeconfig {where} has no context {name!r} (known: {known})",
            field="scheduler.kubernetes.context",
        )
    cluster = sections["clusters"].get(str(ctx.body.get("cluster")))
    if cluster is None or not cluster.body.get("server"):
        raise ConfigError(
            f"kubeconfig context {name!r} names cluster {ctx.body.get('cluster')!r}, "
            "which is missing or has no server",
            field=_SETTING,
        )
    user = sections["users"].get(str(ctx.body.get("user")), _Entry({}, paths[0].parent))
    verify = _tls_context(cluster, user, name)
    return KubeConnection(
        server=str(cluster.body["server"]).rstrip("/"),
        namespace=namespace or str(ctx.body.get("namespace") or "default"),
        verify=verify,
        auth=_token_source(user, name),
        source=f"kubeconfig context {name!r}",
    )


def _blob(entry: _Entry, key: str, context: str) -> bytes | None:
    """``key-data`` (base64) or the file named by ``key`` (relative to its kubeconfig)."""
    data = entry.body.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                f"kubeconfig context {context!r}: {key}-data is not valid base64", field=_SETTING
            ) from None
    path = entry.body.get(key)
    if not path:
        return None
    full = (entry.base / Path(str(path)).expanduser()).resolve()
    try:
        return full.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"kubeconfig context {context!r}: {key} {full} cannot be read: {exc.strerror}",
            field=_SETTING,
        ) from None


def _tls_context(cluster: _Entry, user: _Entry, context: str) -> ssl.SSLContext | bool:
    ca = _blob(cluster, "certificate-authority", context)
    cert = _blob(user, "client-certificate", context)
    key = _blob(user, "client-key", context)
    if cluster.body.get("insecure-skip-tls-verify") and cert is None:
        return False
    ctx = ssl.create_default_context(cadata=ca.decode()) if ca else ssl.create_default_context()
    if cluster.body.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if (cert is None) != (key is None):
        raise ConfigError(
            f"kubeconfig context {context!r}: a client certificate needs both certificate and key",
            field=_SETTING,
        )
    if cert is not None and key is not None:
        _load_cert_chain(ctx, cert, key, context)
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes, context: str) -> None:
    # ssl only loads client certificates from files: write them to a private temporary folder
    # (mode 0700) just long enough to load them.
    with tempfile.TemporaryDirectory(prefix="j2c-kube-") as tmp:
        cert_path, key_path = Path(tmp) / "client.crt", Path(tmp) / "client.key"
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        try:
            ctx.load_cert_chain(str(cert_path), str(key_path))
        except ssl.SSLError as exc:
            raise ConfigError(
                f"kubeconfig context {context!r}: client certificate or key is not valid PEM "
                f"({exc.reason})",
                field=_SETTING,
            ) from None


def _token_source(user: _Entry, context: str) -> TokenSource | None:
    body = user.body
    if body.get("token"):
        return StaticToken(str(body["token"]))
    if body.get("tokenFile"):
        return TokenFile(user.base / Path(str(body["tokenFile"])).expanduser())
    if isinstance(body.get("exec"), dict):
        return _exec_plugin(body["exec"], user.base, context)
    if body.get("auth-provider"):
        provider = (body["auth-provider"] or {}).get("name", "?")
        raise ConfigError(
            f"kubeconfig context {context!r} uses auth-provider {provider!r}, which j2c does not "
            "support",
            field=_SETTING,
            hint="use the provider's exec credential plugin (e.g. gke-gcloud-auth-plugin, "
            "kubelogin) instead",
        )
    if body.get("username") or body.get("password"):
        raise ConfigError(
            f"kubeconfig context {context!r} uses basic auth, which Kubernetes no longer supports",
            field=_SETTING,
        )
    return None


def _exec_plugin(spec: dict[str, Any], base: Path, context: str) -> ExecPlugin:
    command = str(spec.get("command") or "")
    if not command:
        raise ConfigError(f"kubeconfig context {context!r}: exec has no command", field=_SETTING)
    # As in client-go: a command with a path separator is relative to its kubeconfig.
    if os.sep in command and not os.path.isabs(command):
        command = str((base / command).resolve())
    env = {
        str(item["name"]): str(item.get("value", ""))
        for item in spec.get("env") or []
        if isinstance(item, dict) and "name" in item
    }
    return ExecPlugin(
        command=command,
        args=[str(a) for a in spec.get("args") or []],
        env=env,
        api_version=str(spec.get("apiVersion") or "client.authentication.k8s.io/v1"),
        install_hint=spec.get("installHint"),
    )
