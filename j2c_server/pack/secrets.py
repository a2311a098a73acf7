"""Secrets found by looking inside files: private-key blocks and well-known token formats.

Name rules (:mod:`.ignore`) miss a key saved as ``notes.txt`` or a token pasted into a script,
so the scan also reads small regular files (at most :data:`SIZE_CAP` bytes, not binary, not a
known binary suffix) and matches a few precise patterns. A file is read with ``O_NOFOLLOW`` and
``O_NONBLOCK`` and only when ``fstat`` still shows the inode the walk saw, so a swap for a
symlink or a FIFO is never followed or waited on.

Verdicts are cached by (device, inode, size, mtime, ctime) in a small JSON file per layer root
(:class:`VerdictCache`), so an unchanged venv is not re-read on every send. A file whose ctime
is within :data:`RACY_WINDOW_NS` of the scan is not cached (it could change again unseen).

``detect-secrets`` was measured and not used: ~80 ms per file (a venv has 10k+ files).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SIZE_CAP = 256 * 1024
# Bytes one scan of one layer reads at most (a dataset of 100k small JSON files must not turn a
# send into minutes). Files past it are not judged and not cached: the next scan, whose cache
# holds the first ones, goes further. The plan warns about them.
READ_BUDGET = 32 * 1024 * 1024
RACY_WINDOW_NS = 2_000_000_000
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


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class VerdictCache:
    """Content verdicts of one layer root, kept between scans in ``<dir>/<hash of root>.json``.

    Only the verdicts seen by the last scan are written back, so the file follows the tree."""

    def __init__(self, directory: Path | None, root: Path) -> None:
        self.path = (
            directory / f"{hashlib.sha256(str(root).encode()).hexdigest()[:24]}.json"
            if directory is not None
            else None
        )
        self.started_ns = time.time_ns()
        self._old: dict[str, str] = {}
        self._new: dict[str, str] = {}
        self.reads = 0  # files actually read by this scan (for measurements and tests)
        self.bytes_read = 0
        self.unchecked = 0  # files not judged: over READ_BUDGET
        if self.path is not None:
            with contextlib.suppress(OSError, ValueError, TypeError):
                data = json.loads(self.path.read_text())
                if data.get("version") == DETECTOR_VERSION:
                    self._old = {str(k): str(v) for k, v in data["verdicts"].items()}

    def check(
        self, path: str, name: str, st: os.stat_result, skip: Callable[[], bool] | None = None
    ) -> str | None:
        """The reason this file holds a secret, or None (also for files not looked into).
        ``skip`` (asked only when the verdict is not cached) says the file need not be read."""
        if not should_read(name, st.st_size):
            return None
        key = _key(st)
        cached = self._old.get(key)
        if cached is None:
            if skip is not None and skip():
                cached = ""
            elif self.bytes_read + st.st_size > READ_BUDGET:
                self.unchecked += 1
                return None
            else:
                self.reads += 1
                self.bytes_read += st.st_size
                data = read_small(path, st)
                cached = (detect(data) or "") if data is not None else ""
        if st.st_ctime_ns < self.started_ns - RACY_WINDOW_NS:
            self._new[key] = cached
        return cached or None

    def save(self) -> None:
        if self.path is None or self._new == self._old:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=".tmp-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as handle:
                    json.dump({"version": DETECTOR_VERSION, "verdicts": self._new}, handle)
                os.chmod(name, 0o600)
                os.replace(name, self.path)
            finally:
                Path(name).unlink(missing_ok=True)


class PackagedFiles:
    """The files that packages installed into a venv: listed in a ``*.dist-info/RECORD`` (or a
    legacy ``*.egg-info/installed-files.txt``) and not modified since that list was written.

    They are the package's own (``certifi/cacert.pem``, a test key inside ``tornado``), so no
    secret rule applies to them. Read lazily: only when a scan meets a file it must judge."""

    _SLACK_NS = 1_000_000_000  # installers write RECORD last; allow a coarse clock

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, int] | None = None
        self._dirs: set[str] = set()

    def _load(self) -> dict[str, int]:
        files: dict[str, int] = {}
        lib = os.path.join(self.root, "lib")
        sites = [os.path.join(lib, v, "site-packages") for v in _listdir(lib)]
        for site in sites:
            for name in _listdir(site):
                if name.endswith(".dist-info"):
                    listing, base = os.path.join(site, name, "RECORD"), site
                elif name.endswith(".egg-info"):
                    listing = os.path.join(site, name, "installed-files.txt")
                    base = os.path.join(site, name)
                else:
                    continue
                try:
                    written = os.stat(listing).st_mtime_ns
                    with open(listing, encoding="utf-8", errors="replace") as handle:
                        lines = handle.read().splitlines()
                except OSError:
                    continue
                for line in lines:
                    # RECORD: path,hash,size (a path may itself hold commas: cut from the right)
                    path = line.rsplit(",", 2)[0] if listing.endswith("RECORD") else line
                    if path:
                        files[os.path.normpath(os.path.join(base, path))] = written
        for path in files:
            parent = os.path.dirname(path)
            while parent not in self._dirs and len(parent) > len(str(self.root)):
                self._dirs.add(parent)
                parent = os.path.dirname(parent)
        return files

    def has_file(self, path: str, mtime_ns: int) -> bool:
        if self._files is None:
            self._files = self._load()
        written = self._files.get(path)
        return written is not None and mtime_ns <= written + self._SLACK_NS

    def has_dir(self, path: str) -> bool:
        """Some installed file lies in this folder (a package's own ``.aws/`` stays)."""
        if self._files is None:
            self._files = self._load()
        return path in self._dirs


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
