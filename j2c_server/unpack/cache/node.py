"""The per-node layer cache: verified blobs and extracted (and relocated) venvs, kept between jobs.

Enabled by ``--cache-dir DIR`` or ``J2C_UNPACK_CACHE=DIR``; bounded by ``--cache-max`` /
``J2C_UNPACK_CACHE_MAX`` (default 20G). Layout (all private to the cache's owner)::

    DIR/entries/<key>/meta.json       what the entry is, its size and its fingerprint
    DIR/entries/<key>/tree/           an extracted venv, files and folders read-only
    DIR/entries/b-<hex>/data.tar.zst  a verified blob
    DIR/locks/<key>.make, .use        flock files (kept; a few bytes each)
    DIR/tmp/                          entries being built; renamed into entries/ when complete
    DIR/plans/<sha256>-<validator>.json  manifests validated here before (plans.py)

Keys: ``venv-<hex>-<placement>`` (a venv relocated for one placement: the path it runs at and
this interpreter), ``b-<hex>`` (a layer's blob), ``f-<hex>`` (a big file of the code layer,
bigfiles.py: copied into each job's code folder). The code layer has no tree entry: each job
extracts it from its blob, copied into the job's own folder as it is hashed (:mod:`.blobs`).

- **Concurrency**: an entry is built under an exclusive ``.make`` lock, so jobs starting at once
  extract a layer once (the others wait, then use it). It is built under ``tmp/`` and renamed into
  ``entries/`` only when complete, so a crashed build is never found (its leftovers are removed
  by the next build of that key, or by eviction).
- **In use**: a job holds a shared ``.use`` lock on every entry it uses until it exits; eviction
  takes it exclusively without waiting, so an entry in use is never evicted.
- **Bounded**: at every start, the least recently used entries (the ``.use`` file's mtime is
  touched on every use) are evicted until the cache holds at most the cap.
- **Trusted only for what it can show** (a cache is one trust domain per uid: whoever can write
  it as its uid can also rewrite any record it keeps, so no record there is an anchor). What the
  manifest pins is checked against the manifest at every use: every blob's sha256, so the code
  and the big files a job gets are the manifest's bytes (:mod:`.blobs`). A venv entry cannot be
  (it is relocated for this node): it must belong to this user (or ``J2C_UNPACK_CACHE_UID``, an
  operator's cache user jobs cannot be), be writable by no one, and its tree's fingerprint,
  every name, mode, size, mtime, inode and ctime, must be the one recorded when it was built. The
  ctime is the kernel's: any change to a file after the build (an edit in place whose mtime was
  set back, a chmod, a new hard link) moves it, and no unprivileged process can set it back. An
  entry that fails is refused (logged) and built again.

This module holds the locking protocol (make, use, evict) whole: it is only safe as a whole,
and is read in one place. Blob entries are in :mod:`.blobs`; building venv entries and giving
the layers to the job (the code extracted, the venv used in place, linked or copied) in
:mod:`.build`; the file-tree operations in :mod:`.files`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from j2c_server.core.manifest_plan import LayerPlan, LayerRole
from j2c_server.core.units import byte_size
from j2c_server.unpack.cache.build import Prepared, build_entries, materialise
from j2c_server.unpack.cache.files import Refused, fingerprint, rmtree, unsafe
from j2c_server.unpack.cache.plans import PlanCache
from j2c_server.unpack.errors import LocalIOError
from j2c_server.unpack.homes import Placement, _others_could_change
from j2c_server.unpack.interpreter import Interpreter
from j2c_server.unpack.log import Stage, say, warn
from j2c_server.unpack.space import check_free_space
from j2c_server.unpack.summary import add_bytes

CACHE_ENV = "J2C_UNPACK_CACHE"
CACHE_MAX_ENV = "J2C_UNPACK_CACHE_MAX"
CACHE_UID_ENV = "J2C_UNPACK_CACHE_UID"
DEFAULT_MAX = "20G"
LAYOUT = "2"  # part of every key: a changed layout never reads old entries
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Bypass(Exception):
    """The cache cannot serve this job (a lock or folder is not usable): run without it."""


def parse_size(text: str) -> int:
    """``"20G"``, ``"500M"``, ``"1234"`` -> bytes (binary units)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = cleaned.rstrip("KMGT"), cleaned[len(cleaned.rstrip("KMGT")) :]
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise LocalIOError(
            f"the cache size cap {text!r} is not a size like 20G or 500M", field="cache_max"
        ) from None
    return int(value)


@dataclass
class CacheItem:
    """The venv layer as the cache serves it to this job."""

    layer: LayerPlan
    key: str
    home: Path  # where the job needs the layer
    built_for: Path  # the path the venv entry is relocated for
    tree: Path  # the entry's tree in the cache
    use_fd: int = -1
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def hex(self) -> str:
        return self.layer.digest.removeprefix("sha256:")


def open_cache(folder: Path | None, max_text: str | None) -> Cache | None:
    """The cache named by the option or ``J2C_UNPACK_CACHE``; None when none is configured or
    it is refused (said in the log: the job then runs without it)."""
    chosen = str(folder) if folder else os.environ.get(CACHE_ENV, "")
    if not chosen.strip():
        return None
    max_bytes = parse_size(max_text or os.environ.get(CACHE_MAX_ENV) or DEFAULT_MAX)
    owners = {os.geteuid()}
    if (extra := os.environ.get(CACHE_UID_ENV, "").strip()).isdigit():
        owners.add(int(extra))
    root = Path(os.path.abspath(chosen))
    try:
        if not root.exists():
            root.mkdir(parents=True, mode=0o700)
        why = _others_could_change(root)
        st = os.lstat(root)
        if why and st.st_uid in owners and not st.st_mode & 0o022:
            why = None  # an operator's cache user owns it: the rest of the chain was checked
        if why:
            warn("cache", f"not used: {root} {why}")
            return None
        for name in ("entries", "locks", "tmp", "plans"):
            sub = root / name
            with contextlib.suppress(FileExistsError):
                sub.mkdir(mode=0o700)
            if problem := unsafe(os.lstat(sub), owners, folder=True):
                warn("cache", f"not used: {sub} {problem}")
                return None
    except OSError as exc:
        warn("cache", f"not used: {root} cannot be prepared ({exc.strerror or exc})")
        return None
    return Cache(root, max_bytes, frozenset(owners))


class Cache:
    def __init__(self, root: Path, max_bytes: int, owners: frozenset[int]) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.owners = owners
        self.entries = root / "entries"
        self.locks = root / "locks"
        self.tmp = root / "tmp"
        self.plans = PlanCache(root / "plans", owners)  # manifests validated on this node
        self._held: list[int] = []
        self._code_old = ""  # the code layer's source path, for the job being prepared
        self._code_parts: list[LayerPlan] = []  # its parts, in the manifest's order
        self._base: list[LayerPlan] = []  # its shipped lab-base packages (format_version 4)

    def close(self) -> None:
        """Release this job's use locks (at exit: its entries may be evicted from now on)."""
        for fd in self._held:
            os.close(fd)
        self._held.clear()

    # ------------------------------------------------------------------ the job's layers

    def prepare(
        self,
        manifest_uri: str,
        layers: list[LayerPlan],
        placement: Placement,
        interpreter: Interpreter,
        blob_dir: Path,
    ) -> Prepared:
        """Phases 4-6 through the cache: the code layer's verified blobs copied into ``blob_dir``
        (the job's own folder), the venv's entry found (or built once); then the code extracted
        and the venv used in place or materialised, and proved to run. Raises Bypass before
        anything is written to the job's homes when the cache cannot serve the job."""
        from j2c_server.unpack.cache.blobs import layer_blobs

        self._code_old = next(x.source_path for x in layers if x.role == LayerRole.code)
        self._code_parts = [x for x in layers if x.role == LayerRole.code]
        # Shipped lab-base packages are part of the venv's entry (base_packages.py).
        self._base = [x for x in layers if x.role == LayerRole.base]
        venvs = [x for x in layers if x.role == LayerRole.venv]
        items = [self._plan(layer, placement, interpreter) for layer in venvs]
        stage = Stage("cache", f"{self.root}")
        check_free_space(self._code_parts, placement, blob_dir)
        blob_dir.mkdir(parents=True, exist_ok=True)
        download = self.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
        code, fetched = layer_blobs(
            self, manifest_uri, self._code_parts, download, copy_to=blob_dir
        )
        for item in items:
            item.use_fd = self.lock(item.key, "use", fcntl.LOCK_SH)
        missing = [item for item in items if not self._found(item, repair=False)]
        made: list[CacheItem] = []
        makes: list[int] = []
        try:
            for item in missing:
                makes.append(self.lock(item.key, "make", fcntl.LOCK_EX))
                if self._found(item, repair=True):
                    say("cache", f"{_name(item)}: made by another job meanwhile")
                else:
                    made.append(item)
            if made:
                build_entries(
                    self,
                    manifest_uri,
                    made,
                    placement,
                    interpreter,
                    base=self._base,
                    code_old=self._code_old,
                )
        finally:
            for fd in makes:
                os.close(fd)
        for item in items:
            os.utime(item.use_fd)  # least recently used = oldest mtime
        total = len(items) + len(self._code_parts)
        built = len(made) + fetched
        reused = [item for item in items if item not in made]
        base = sum(x.size for x in self._base) if reused else 0
        add_bytes(reused=sum(i.layer.size for i in reused) + base)  # base: in the venv's entry
        stage.done(f"{total - built} of {total} layers from the cache, {built} built")
        self.evict()  # also on warm starts: a lowered cap, or entries freed since
        return materialise(
            items,
            placement,
            interpreter,
            code=[(part, code[part.digest.removeprefix("sha256:")]) for part in self._code_parts],
            code_old=self._code_old,
        )

    def _plan(self, layer: LayerPlan, placement: Placement, interpreter: Interpreter) -> CacheItem:
        """The venv layer's entry for this placement and interpreter."""
        hexdigest = layer.digest.removeprefix("sha256:")
        home = placement.homes[layer.role]
        # Original paths: relocated for that path. Relocate mode: for its own path in the cache.
        where = str(home) if placement.mode == "original" else "in-place"
        # The interpreter's identity too: a new image (same path, other binary) makes a new
        # entry, so an entry's proof that it runs (at build) holds for every later use.
        base = os.stat(interpreter.executable)
        identity = [str(interpreter.executable), base.st_size, base.st_mtime_ns, base.st_ino]
        bases = [x.digest for x in self._base]  # none: the keys entries had before format 4
        facts = json.dumps([LAYOUT, hexdigest, where, identity, *([bases] if bases else [])])
        key = f"venv-{hexdigest[:32]}-{hashlib.sha256(facts.encode()).hexdigest()[:16]}"
        tree = self.entries / key / "tree"
        return CacheItem(layer, key, home, home if placement.mode == "original" else tree, tree)

    def lock(self, key: str, kind: str, how: int) -> int:
        """``locks/<key>.<kind>`` opened, checked and flocked; a use lock is held until close()."""
        path = self.locks / f"{key}.{kind}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        except OSError as exc:
            raise Bypass(f"{path} cannot be opened ({exc.strerror or exc})") from None
        if why := unsafe(os.fstat(fd), self.owners, folder=False):
            os.close(fd)
            raise Bypass(f"{path} {why}")
        try:
            fcntl.flock(fd, how)
        except OSError as exc:  # e.g. ENOLCK: a filesystem without flock (some NFS setups)
            os.close(fd)
            raise Bypass(f"{path} cannot be locked ({exc.strerror or exc})") from None
        if kind == "use":
            self._held.append(fd)
        return fd

    # ------------------------------------------------------------------ is it there and sound?

    def _found(self, item: CacheItem, *, repair: bool) -> bool:
        """The entry is there and passes its checks. With ``repair`` (the make lock is held),
        a refused one is removed, when no other job uses it, so that it is built again."""
        try:
            item.meta = self._check_tree(item.key)
            return True
        except FileNotFoundError:
            return False
        except Refused as exc:
            if not repair:
                return False
            warn("cache", f"{_name(item)}: entry refused ({exc}); building it again")
            self._discard(item.key, item.use_fd)
            return False

    def _check_tree(self, key: str) -> dict[str, object]:
        entry = self.entries / key
        meta = self.read_meta(entry)
        tree = entry / "tree"
        if why := unsafe(os.lstat(tree), self.owners, folder=True):
            raise Refused(f"its tree {why}")
        if fingerprint(tree, self.owners) != meta.get("fingerprint"):
            raise Refused("its files changed since it was built")
        return meta

    def read_meta(self, entry: Path) -> dict[str, object]:
        """An entry's ``meta.json``, the entry and the file checked as this cache's own."""
        st = os.lstat(entry)  # FileNotFoundError: not there
        if why := unsafe(st, self.owners, folder=True):
            raise Refused(f"{entry} {why}")
        try:
            fd = os.open(entry / "meta.json", os.O_RDONLY | _OPEN_FLAGS)
        except FileNotFoundError:
            raise Refused("it has no meta.json (an incomplete entry)") from None
        except OSError as exc:
            raise Refused(f"its meta.json cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as handle:
            if why := unsafe(os.fstat(handle.fileno()), self.owners, folder=False):
                raise Refused(f"its meta.json {why}")
            try:
                meta = json.loads(handle.read())
            except ValueError:
                raise Refused("its meta.json is not JSON") from None
        if not isinstance(meta, dict):
            raise Refused("its meta.json is not an object")
        return meta

    def _discard(self, key: str, use_fd: int) -> None:
        """Remove an entry, if no other job holds it (else raise Bypass: it is theirs)."""
        try:
            fcntl.flock(use_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(use_fd, fcntl.LOCK_SH)
            raise Bypass(f"the refused entry {key} is in use by another job") from None
        try:
            self.remove(self.entries / key)
        finally:
            fcntl.flock(use_fd, fcntl.LOCK_SH)

    def remove(self, path: Path) -> None:
        """Moved aside into ``tmp/`` (one rename: never found half-removed), then deleted."""
        if not os.path.lexists(path):
            return
        aside = self.tmp / f"removed-{path.name}-{secrets.token_hex(4)}"
        try:
            os.rename(path, aside)
        except OSError as exc:
            raise Bypass(f"{path} cannot be removed ({exc.strerror or exc})") from None
        rmtree(aside)

    def building(self, key: str) -> Path:
        """A fresh build folder for ``key`` (the make lock is held), earlier leftovers removed."""
        for leftover in self.tmp.glob(f"{key}.*"):
            say("cache", f"removing {leftover.name}, left by a build that did not finish")
            rmtree(leftover)
        building = self.tmp / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        building.mkdir(mode=0o700)
        return building

    # ------------------------------------------------------------------ bounded

    def evict(self) -> None:
        """Remove least recently used entries not in use until the cache holds at most the cap;
        also what crashed builds and removals left in tmp/."""
        for leftover in self.tmp.iterdir():
            key = leftover.name.split(".")[0]
            if leftover.name.startswith(("removed-", "download-")) and not _recent(leftover):
                rmtree(leftover)
            elif "." in leftover.name:
                fd = self._try_lock(key, "make")
                if fd is not None:
                    rmtree(leftover)
                    os.close(fd)
        sizes: list[tuple[float, str, int]] = []
        for entry in self.entries.iterdir():
            try:
                size = int(self.read_meta(entry).get("bytes", 0))  # type: ignore[call-overload]
            except (Refused, OSError, TypeError, ValueError):
                size = 0
            try:
                used = os.stat(self.locks / f"{entry.name}.use").st_mtime
            except OSError:
                used = 0.0
            sizes.append((used, entry.name, size))
        total = sum(size for _, _, size in sizes)
        for _, key, size in sorted(sizes):
            if total <= self.max_bytes:
                break
            fd = self._try_lock(key, "use")
            if fd is None:
                continue  # in use by a running job
            try:
                self.remove(self.entries / key)
            except Bypass as exc:
                warn("cache", f"cannot evict {key}: {exc}")
                continue
            finally:
                os.close(fd)
            total -= size
            say("cache", f"evicted {key} ({byte_size(size)}, least recently used)")
        say("cache", f"{byte_size(total)} in the cache (cap {byte_size(self.max_bytes)})")

    def _try_lock(self, key: str, kind: str) -> int | None:
        try:
            fd = os.open(self.locks / f"{key}.{kind}", os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd


def _name(item: CacheItem) -> str:
    return f"{item.layer.role.value} layer {item.hex[:12]}"


def _recent(path: Path) -> bool:
    """Younger than an hour: perhaps still being written by a running job."""
    with contextlib.suppress(OSError):
        return time.time() - os.lstat(path).st_mtime < 3600
    return False
