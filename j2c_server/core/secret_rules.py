"""What never travels and what looks like a secret: rules the packer (lab) and ``j2c-unpack``
(the job, syncing what it wrote back) both apply, standard library only.

By name: folders that are junk in any project, and name patterns of secrets (``.env*``, SSH
and cloud credentials, key files). By content: small regular files (at most :data:`SIZE_CAP`
bytes, not binary, not a known binary suffix) matched against a few precise patterns: private
key blocks and well-known token formats. A file is read with ``O_NOFOLLOW`` and ``O_NONBLOCK``
and only when ``fstat`` still shows the inode the walk saw, so a swap for a symlink or a FIFO is
never followed or waited on. ``detect-secrets`` was measured and not used: ~80 ms per file (a
venv has 10k+ files).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import stat
from collections.abc import Callable

JUNK_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".ipynb_checkpoints",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
# Key or certificate files by suffix: the code layer only (a venv ships CA bundles; a private
# key in PEM form is found there by its content).
KEY_FILE_PATTERNS = ("*.key", "*.pem", "*.der")
# Name patterns without a trailing '/' match files only, except these (cookiecutter's '.envs/').
DIR_TOO = frozenset({".env*"})
# '**/' keeps a pattern with an inner '/' matching at any depth (gitignore anchors it otherwise).
SECRET_PATTERNS = (
    ".env*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".aws/",
    ".ssh/",
    ".gnupg/",
    ".azure/",
    ".kube/",
    "**/.config/gcloud/",
    "**/.docker/config.json",
    ".dockercfg",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    ".htpasswd",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "application_default_credentials.json",
    "credentials.json",
    "client_secret*.json",
    "service-account*.json",
    "token",
    ".token",
    "kubeconfig",
    "*.kubeconfig",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".my.cnf",
    "secrets.yaml",
    "secrets.yml",
    "secrets.toml",
    "secrets.json",
    "**/.huggingface/token",
    "**/.cache/huggingface/token",
    "**/.cache/huggingface/stored_tokens",
    "**/.kaggle/kaggle.json",
    "**/.config/gh/hosts.yml",
    ".databrickscfg",
    "*.tfstate",
    "*.tfstate.backup",
    "**/.terraform.d/credentials.tfrc.json",
    "pip.conf",  # .pip/pip.conf, ~/.config/pip/pip.conf, <venv>/pip.conf: index tokens
    "pip.ini",
    "**/.cargo/credentials",
    "**/.cargo/credentials.toml",
    "**/.gem/credentials",
    "rclone.conf",
    "jpserver-*.json",  # a Jupyter server's runtime file: holds its token
    ".*_history",  # .bash_history .zsh_history .python_history .sqlite_history .psql_history ...
    ".Rhistory",
    ".lesshst",
    ".viminfo",
    "**/.ipython/profile_*/history.sqlite",
)

SIZE_CAP = 256 * 1024
DETECTOR_VERSION = 1  # bump when the patterns change: cached verdicts are then ignored
_BINARY_PROBE = 1024
# Files that are binary by construction or too many to matter; a user's token lives in text.
SKIP_SUFFIXES = frozenset(
    {
        ".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".a", ".o", ".lib", ".exe",
        ".whl", ".zip", ".gz", ".bz2", ".xz", ".zst", ".tar", ".tgz", ".7z",
        ".png", ".jpg", ".jpeg", ".gif", ".ico", ".bmp", ".webp", ".tiff", ".pdf",
        ".woff", ".woff2", ".ttf", ".otf", ".eot", ".mo",
        ".npy", ".npz", ".pt", ".pkl", ".parquet", ".h5", ".onnx", ".safetensors",
    }
)  # fmt: skip

_PRIVATE_KEY = re.compile(
    rb"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----[\s\S]{0,400}?[A-Za-z0-9+/]{64}"
)
_GCP_TYPE = re.compile(rb'"type"\s*:\s*"service_account"')
_GCP_KEY = re.compile(rb'"private_key"\s*:\s*"-----BEGIN')
_AWS_SECRET = re.compile(
    rb"(?i:secret_?access_?key)[\"']?\s*[:=]\s*[\"']?(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
)
_GITHUB_MARKER = re.compile(rb"gh[pousr]_")  # a literal prefix: re searches it fast
_GITHUB = re.compile(rb"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{60,})\b")
_SLACK = re.compile(
    rb"\bxox[abposr]-[0-9]{6,}-[0-9A-Za-z-]{10,}"
    rb"|hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}"
)
_HUGGING_FACE = re.compile(rb"\bhf_[A-Za-z0-9]{34}\b")
_JWT = re.compile(rb"\b(eyJ[A-Za-z0-9_-]{10,})\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}")


def _has(*markers: bytes) -> Callable[[bytes], bool]:
    return lambda data: any(marker in data for marker in markers)


def _aws(data: bytes) -> bool:
    return any(b"EXAMPLE" not in m.group("value") for m in _AWS_SECRET.finditer(data))


def _gcp(data: bytes) -> bool:
    return bool(_GCP_TYPE.search(data) and _GCP_KEY.search(data))


def _jwt(data: bytes) -> bool:
    """A JWT whose header really decodes to JSON naming an algorithm (not any 'eyJ' text)."""
    for match in _JWT.finditer(data):
        header = match.group(1)
        try:
            decoded = json.loads(base64.urlsafe_b64decode(header + b"=" * (-len(header) % 4)))
        except ValueError:
            continue
        if isinstance(decoded, dict) and "alg" in decoded:
            return True
    return False


def _search(pattern: re.Pattern[bytes]) -> Callable[[bytes], bool]:
    return lambda data: pattern.search(data) is not None


# (reason, cheap gate, precise check), most specific first: the first match names the reason.
# The gates are substring searches (C speed; a regex alternation or a leading \b or (?i) makes
# re scan at ~20 MB/s), so a file without any marker costs a few fast passes.
DETECTORS: tuple[tuple[str, Callable[[bytes], bool], Callable[[bytes], bool]], ...] = (
    ("GCP service account key", _has(b"service_account"), _gcp),
    ("private key block", _has(b"PRIVATE KEY"), _search(_PRIVATE_KEY)),
    ("AWS secret access key", _has(b"ccess_key", b"CCESS_KEY", b"ccessKey"), _aws),
    (
        "GitHub token",
        lambda data: b"github_pat_" in data or _GITHUB_MARKER.search(data) is not None,
        _search(_GITHUB),
    ),
    ("Slack token", _has(b"xox", b"hooks.slack.com/"), _search(_SLACK)),
    ("Hugging Face token", _has(b"hf_"), _search(_HUGGING_FACE)),
    ("JWT", _has(b"eyJ"), _jwt),
)


def detect(data: bytes) -> str | None:
    """Why ``data`` looks like it holds a secret, or None."""
    return next((reason for reason, gate, check in DETECTORS if gate(data) and check(data)), None)


def should_read(name: str, size: int) -> bool:
    """Whether a regular file of this name and size is looked into at all."""
    if size == 0 or size > SIZE_CAP:
        return False
    dot = name.rfind(".")
    return dot <= 0 or name[dot:].lower() not in SKIP_SUFFIXES


def read_small(path: str, st: os.stat_result) -> bytes | None:
    """The file's bytes if it is still the regular file the walk saw (same device and inode),
    never following a symlink nor blocking on a FIFO; None when it changed or is binary."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            return None
        raise
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(SIZE_CAP)
    finally:
        os.close(fd)
    if b"\0" in data[:_BINARY_PROBE]:
        return None
    return data
