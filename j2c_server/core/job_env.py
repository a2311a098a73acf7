"""Credentials in a job's environment: one rule for every backend.

A request is stored in the registry, listed by ``GET /jobs`` and shown in events, so it must not
carry a credential. An ``env`` entry whose name looks like one (:func:`is_credential_name`:
``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``, ``*_TOKEN*``, ``*_KEY``, ``*_KEY_ID``, ...) or
whose value does (:func:`credential_value`: a URL with a password, a presigned URL's signature,
a private key, the token formats of AWS, GitHub, GitLab, Slack, Hugging Face, OpenAI, Google, a
JWT) is refused (400 naming ``env.<NAME>``), unless the operator lists the name in
``scheduler.pass_env``. A listed name is sent empty; the job gets the value of the submitting
server's own environment (:func:`job_env`).

Such values reach the job by reference, never in a spec that a scheduler stores and shows (a
Kubernetes Job, a Ray job's ``runtime_env``, a container's create request, a Slurm job's
environment): :func:`split_env` sorts a job's environment into what may be written there and
what is secret by name or by value; each backend hands the secret part over its own way (a
Secret, a 0600 file on the job's own mount: ``schedulers/job_secrets.py``), and wherever a spec
is shown or recorded the secret values are masked (:func:`mask_env`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from urllib.parse import parse_qsl, urlsplit

from j2c_server.core.errors import InvalidInput
from j2c_server.core.secret_rules import detect

# Anywhere in the name: rarely part of an innocent word.
_CREDENTIAL_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY", "APIKEY")
# Whole ``_``-separated parts only: TOKEN in HF_TOKEN, not in TOKENIZERS_PARALLELISM.
_CREDENTIAL_PARTS = frozenset({"TOKEN", "TOKENS", "KEY", "KEYS", "PASS", "JWT", "PAT"})
_SPLIT = re.compile(r"[^A-Z0-9]+")
MASK = "<from the server's environment>"
HINT = (
    "give a job a credential through the operator's mechanism: a Kubernetes Secret "
    "(scheduler.kubernetes.env_from_secret), the Slurm nodes' environment, or a name the "
    "operator lists in scheduler.pass_env"
)


# Token formats a value is recognised by (secret_rules.detect knows private keys, AWS secret keys
# in key=value form, GitHub, Slack, Hugging Face tokens and JWTs).
_VALUE_FORMATS = (
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("an OpenAI or Anthropic key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
)
# Query keys that make a URL a bearer credential (presigned S3/GCS URLs, Azure SAS).
_SIGNATURE_KEYS = frozenset({"x-amz-signature", "x-goog-signature", "signature", "sig"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def credential_value(value: str) -> str | None:
    """What credential ``value`` looks like (``"a URL with a password"``...), or None."""
    for match in _URL.finditer(value):
        try:
            parts = urlsplit(match.group(0))
            password = parts.password
        except ValueError:
            continue
        if password:
            return "a URL with a password"
        if any(key.lower() in _SIGNATURE_KEYS for key, _ in parse_qsl(parts.query)):
            return "a signed URL"
    for what, pattern in _VALUE_FORMATS:
        if pattern.search(value):
            return what
    found = detect(value.encode("utf-8", "surrogateescape"))
    return f"a {found}" if found else None


def is_credential_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    upper = name.upper()
    if any(word in upper for word in _CREDENTIAL_WORDS):
        return True
    return not _CREDENTIAL_PARTS.isdisjoint(_SPLIT.split(upper))


def check_request_env(
    env: Mapping[str, str], pass_env: Collection[str], environ: Mapping[str, str] | None = None
) -> None:
    """Refuse credentials in a request's env (InvalidInput naming ``env.<NAME>``)."""
    environ = os.environ if environ is None else environ
    for name in sorted(env):
        field = f"env.{name}"
        if name in pass_env:
            if env[name]:
                raise InvalidInput(
                    f"{field}: its value comes from the server's environment "
                    "(scheduler.pass_env lists it); send it empty",
                    field=field,
                )
            if name not in environ:
                raise InvalidInput(
                    f"{field}: scheduler.pass_env lists it, but the server's environment does "
                    "not set it",
                    field=field,
                    hint="ask the operator to set it where the Jupyter server starts",
                )
        elif is_credential_name(name):
            raise InvalidInput(
                f"{field}: looks like a credential, and a request's env is stored with the job "
                "and shown to whoever lists jobs",
                field=field,
                hint=HINT,
            )
        elif what := credential_value(env[name]):
            raise InvalidInput(
                f"{field}: its value looks like a credential ({what}), and a request's env is "
                "stored with the job and shown to whoever lists jobs",
                field=field,
                hint=HINT,
            )


def job_env(
    env: Mapping[str, str], pass_env: Collection[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The request's env as the job gets it: listed names take the server's value."""
    environ = os.environ if environ is None else environ
    out = dict(env)
    for name in env:
        if name in pass_env:
            if name not in environ:
                raise InvalidInput(
                    f"env.{name}: scheduler.pass_env lists it, but the environment of the "
                    "process submitting the job does not set it",
                    field=f"env.{name}",
                )
            out[name] = environ[name]
    return out


def is_secret(name: str, value: str, pass_env: Collection[str] = ()) -> bool:
    """A job env entry that must not be shown, recorded or written into a spec: by its name
    (or the operator's ``pass_env`` list), or by its value."""
    return name in pass_env or is_credential_name(name) or credential_value(value) is not None


def split_env(
    env: Mapping[str, str], pass_env: Collection[str] = ()
) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` as (what a spec may show, what reaches the job by reference only)."""
    plain: dict[str, str] = {}
    secret: dict[str, str] = {}
    for name, value in env.items():
        (secret if is_secret(name, value, pass_env) else plain)[name] = value
    return plain, secret


def mask_env(env: Mapping[str, str], pass_env: Collection[str] = ()) -> dict[str, str]:
    """``env`` with the values of secret entries replaced by :data:`MASK`."""
    return {
        name: MASK if is_secret(name, value, pass_env) else value for name, value in env.items()
    }
