"""Secrets found by looking inside files, as the scan does it: the detection itself
(private-key blocks, token formats: :mod:`j2c_server.core.secret_rules`, shared with
``j2c-unpack``) within a read budget per scan, and its verdicts kept between scans.

Name rules (:mod:`.ignore`) miss a key saved as ``notes.txt`` or a token pasted into a script,
so the scan also reads small regular files.

Verdicts are cached by (device, inode, size, mtime, ctime) in a small JSON file per layer root
(:class:`VerdictCache`), so an unchanged venv is not re-read on every send. A file whose ctime
is within :data:`RACY_WINDOW_NS` of the scan is not cached (it could change again unseen).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from j2c_server.core.secret_rules import DETECTOR_VERSION, detect, read_small, should_read

# Bytes one scan of one layer reads at most (a dataset of 100k small JSON files must not turn a
# send into minutes). Files past it are not judged and not cached: the next scan, whose cache
# holds the first ones, goes further. The plan warns about them.
READ_BUDGET = 32 * 1024 * 1024
RACY_WINDOW_NS = 2_000_000_000


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
