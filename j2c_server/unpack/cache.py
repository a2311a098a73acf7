"""The per-node layer cache: verified blobs and extracted (and relocated) layers, kept between jobs.

Enabled by ``--cache-dir DIR`` or ``J2C_UNPACK_CACHE=DIR``; bounded by ``--cache-max`` /
``J2C_UNPACK_CACHE_MAX`` (default 20G). Layout (all private to the cache's owner)::

    DIR/entries/<key>/meta.json       what the entry is, its size and its fingerprint
    DIR/entries/<key>/tree/           an extracted layer, files and folders read-only
    DIR/entries/b-<hex>/data.tar.zst  a verified blob
    DIR/locks/<key>.make, .use        flock files (kept; a few bytes each)
    DIR/tmp/                          entries being built; renamed into entries/ when complete
    DIR/plans/<sha256>-<validator>.json  manifests validated here before (plan_cache.py)

Keys: ``code-<hex>`` (a code layer is never rewritten), ``venv-<hex>-<placement>`` (a venv
relocated for one placement: the path it runs at and this interpreter), ``b-<hex>`` (a blob),
``f-<hex>`` (a big file of the code layer, bigfiles.py: copied into each job's code folder).

- **Concurrency**: an entry is built under an exclusive ``.make`` lock, so jobs starting at once
  extract a layer once (the others wait, then use it). It is built under ``tmp/`` and renamed into
  ``entries/`` only when complete, so a crashed build is never found (its leftovers are removed
  by the next build of that key, or by eviction).
- **In use**: a job holds a shared ``.use`` lock on every entry it uses until it exits; eviction
  takes it exclusively without waiting, so an entry in use is never evicted.
- **Bounded**: at every start, the least recently used entries (the ``.use`` file's mtime is
  touched on every use) are evicted until the cache holds at most the cap.
- **Not poisonable**: the cache folder must be private (homes.py's ownership rules); every entry,
  lock and tree file must belong to this user (or ``J2C_UNPACK_CACHE_UID``, an operator's cache
  user) and be writable by no one else. A tree's fingerprint (every name, mode, size, mtime and
  inode) is compared with the one recorded when it was built; a blob whose stat changed is hashed
  again. An entry that fails is refused (logged) and built again.

How a job uses a venv entry: in relocate mode it runs **in place** (read-only, at
``entries/<key>/tree``) unless it lives inside the project or embeds the project's path
(editable installs); otherwise the tree is **materialised** into the job's home by hard links
(copies across filesystems), then the few files that name another path are rewritten, each one
replaced by a new file (a rename), so the cache's inodes are never written. Cached files have no
write bits: a job that writes a venv file gets EACCES; one that chmods it first changes its mode
or mtime, which the fingerprint catches at the next use. The code layer is always **copied**
(the job's working tree is its own and writable); a code layer in parts (format_version 3) has
one ``code-<hex>`` entry per part, copied one after the other into the same folder. A venv entry
is started once when it is built (before it is sealed) and not again while its fingerprint and
the interpreter binary are the same.

The file-tree operations are in :mod:`.cache_files`. What is left stays one module, over 400
lines, on purpose: the locking protocol (make, use, evict) is only safe as a whole, and is read
in one place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from j2c_server.core.manifest_plan import FilePlan, LayerPlan, LayerRole
from j2c_server.core.units import byte_size
from j2c_server.unpack.cache_files import (
    Refused,
    copy_tree,
    fingerprint,
    read_only,
    rmtree,
    unsafe,
    write_json,
)
from j2c_server.unpack.errors import LocalIOError
from j2c_server.unpack.homes import Placement, _others_could_change
from j2c_server.unpack.interpreter import Interpreter
from j2c_server.unpack.log import Stage, say
from j2c_server.unpack.plan_cache import PlanCache
from j2c_server.unpack.summary import add_bytes

CACHE_ENV = "J2C_UNPACK_CACHE"
CACHE_MAX_ENV = "J2C_UNPACK_CACHE_MAX"
CACHE_UID_ENV = "J2C_UNPACK_CACHE_UID"
DEFAULT_MAX = "20G"
LAYOUT = "1"  # part of every key: a changed layout never reads old entries
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
class _Item:
    """One layer as the cache serves it to this job."""

    layer: LayerPlan
    key: str
    home: Path  # where the job needs the layer
    built_for: Path  # the path a venv entry is relocated for (the code: its home)
    use_fd: int = -1
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def hex(self) -> str:
        return self.layer.digest.removeprefix("sha256:")

    @property
    def is_venv(self) -> bool:
        return self.layer.role == LayerRole.venv


@dataclass(frozen=True)
class Prepared:
    placement: Placement  # the venv's home may now be inside the cache
    python: Path
    env: dict[str, str] = field(default_factory=dict)  # for the job, on top of its own


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
            say("cache", f"not used: {root} {why}")
            return None
        for name in ("entries", "locks", "tmp", "plans"):
            sub = root / name
            with contextlib.suppress(FileExistsError):
                sub.mkdir(mode=0o700)
            if problem := unsafe(os.lstat(sub), owners, folder=True):
                say("cache", f"not used: {sub} {problem}")
                return None
    except OSError as exc:
        say("cache", f"not used: {root} cannot be prepared ({exc.strerror or exc})")
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
    ) -> Prepared:
        """Phases 4-6 through the cache: every layer's entry found (or built once), then
        materialised or used in place; the venv proved to run. Raises Bypass before anything
        is written to the job's homes when the cache cannot serve the job."""
        self._code_old = next(x.source_path for x in layers if x.role == LayerRole.code)
        self._code_parts = [x for x in layers if x.role == LayerRole.code]
        # Shipped lab-base packages are part of the venv's entry (base_packages.py).
        self._base = [x for x in layers if x.role == LayerRole.base]
        layers = [x for x in layers if x.role != LayerRole.base]
        items = [self._plan(layer, placement, interpreter) for layer in layers]
        items.sort(key=lambda item: item.key)  # one lock order for every job: no deadlock
        stage = Stage("cache", f"{self.root}")
        for item in items:
            item.use_fd = self._lock(item.key, "use", fcntl.LOCK_SH)
        missing = [item for item in items if not self._found(item, repair=False)]
        made: list[_Item] = []
        makes: list[int] = []
        try:
            for item in missing:
                makes.append(self._lock(item.key, "make", fcntl.LOCK_EX))
                if self._found(item, repair=True):
                    say("cache", f"{_name(item)}: made by another job meanwhile")
                else:
                    made.append(item)
            if made:
                self._build_all(manifest_uri, made, placement, interpreter)
        finally:
            for fd in makes:
                os.close(fd)
        for item in items:
            os.utime(item.use_fd)  # least recently used = oldest mtime
        hits = len(items) - len(made)
        reused = [i for i in items if all(i is not m for m in made)]
        base = sum(x.size for x in self._base) if any(i.is_venv for i in reused) else 0
        add_bytes(reused=sum(i.layer.size for i in reused) + base)  # base: in the venv's entry
        stage.done(f"{hits} of {len(items)} layers from the cache, {len(made)} built")
        self.evict()  # also on warm starts: a lowered cap, or entries freed since
        return self._materialise(items, placement, interpreter)

    def _plan(self, layer: LayerPlan, placement: Placement, interpreter: Interpreter) -> _Item:
        hexdigest = layer.digest.removeprefix("sha256:")
        home = placement.homes[layer.role]
        if layer.role != LayerRole.venv:
            return _Item(layer, f"code-{hexdigest}-{LAYOUT}", home, home)
        # Original paths: relocated for that path. Relocate mode: for its own path in the cache.
        where = str(home) if placement.mode == "original" else "in-place"
        # The interpreter's identity too: a new image (same path, other binary) makes a new
        # entry, so an entry's proof that it runs (at build) holds for every later use.
        base = os.stat(interpreter.executable)
        identity = [str(interpreter.executable), base.st_size, base.st_mtime_ns, base.st_ino]
        bases = [x.digest for x in self._base]  # none: the keys entries had before format 4
        facts = json.dumps([LAYOUT, hexdigest, where, identity, *([bases] if bases else [])])
        key = f"venv-{hexdigest[:32]}-{hashlib.sha256(facts.encode()).hexdigest()[:16]}"
        built_for = home if placement.mode == "original" else self.entries / key / "tree"
        return _Item(layer, key, home, built_for)

    def _lock(self, key: str, kind: str, how: int) -> int:
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

    def _found(self, item: _Item, *, repair: bool) -> bool:
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
            say("cache", f"{_name(item)}: entry refused ({exc}); building it again")
            self._discard(item.key, item.use_fd)
            return False

    def _check_tree(self, key: str) -> dict[str, object]:
        entry = self.entries / key
        meta = self._read_meta(entry)
        tree = entry / "tree"
        if why := unsafe(os.lstat(tree), self.owners, folder=True):
            raise Refused(f"its tree {why}")
        if fingerprint(tree, self.owners) != meta.get("fingerprint"):
            raise Refused("its files changed since it was built")
        return meta

    def _read_meta(self, entry: Path) -> dict[str, object]:
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
            self._remove(self.entries / key)
        finally:
            fcntl.flock(use_fd, fcntl.LOCK_SH)

    def _remove(self, path: Path) -> None:
        if not os.path.lexists(path):
            return
        aside = self.tmp / f"removed-{path.name}-{secrets.token_hex(4)}"
        try:
            os.rename(path, aside)
        except OSError as exc:
            raise Bypass(f"{path} cannot be removed ({exc.strerror or exc})") from None
        rmtree(aside)

    # ------------------------------------------------------------------ building entries

    def _build_all(
        self, manifest_uri: str, made: list[_Item], placement: Placement, interpreter: Interpreter
    ) -> None:
        from j2c_server.unpack.space import check_free_space

        blob_dir = self.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
        base = self._base if any(item.is_venv for item in made) else []
        check_free_space([*(item.layer for item in made), *base], placement, blob_dir)
        blobs = self._blobs(manifest_uri, [*(item.layer for item in made), *base], blob_dir)
        base_blobs = [(x, blobs[x.digest.removeprefix("sha256:")]) for x in base]
        stage = Stage("extracting")
        total = 0
        for item in sorted(made, key=lambda i: i.is_venv):
            total += self._build(item, blobs[item.hex], interpreter, base_blobs)
        stage.done(f"{byte_size(total)} written into the cache")

    def _blobs(self, manifest_uri: str, layers: list[LayerPlan], blob_dir: Path) -> dict[str, Path]:
        """Each layer's verified blob in the cache: found, or downloaded (once) and kept."""
        from j2c_server.unpack.fetch import download_layers

        found: dict[str, Path] = {}
        makes: list[int] = []
        wanted: list[LayerPlan] = []
        try:
            for layer in sorted(layers, key=lambda item: item.digest):
                key = f"b-{layer.digest.removeprefix('sha256:')}"
                self._lock(key, "use", fcntl.LOCK_SH)
                if path := self._blob(key, layer, repair=False):
                    found[layer.digest.removeprefix("sha256:")] = path
                    add_bytes(reused=layer.size)
                    continue
                makes.append(self._lock(key, "make", fcntl.LOCK_EX))
                if path := self._blob(key, layer, repair=True):
                    found[layer.digest.removeprefix("sha256:")] = path
                    add_bytes(reused=layer.size)
                else:
                    wanted.append(layer)
            if wanted:
                try:
                    for fetched in download_layers(manifest_uri, wanted, blob_dir):
                        hexdigest = fetched.layer.digest.removeprefix("sha256:")
                        found[hexdigest] = self._keep_blob(f"b-{hexdigest}", fetched.path)
                finally:
                    rmtree(blob_dir)
        finally:
            for fd in makes:
                os.close(fd)
        return found

    def file_blobs(self, manifest_uri: str, blobs: list[FilePlan]) -> dict[str, Path]:
        """Each big file's verified blob (one per digest) in the cache, as ``f-<hex>`` entries:
        found, or downloaded once and kept; held (use lock) until the job ends. Digest -> path."""
        from j2c_server.unpack.bigfiles import download_files

        found: dict[str, Path] = {}
        makes: list[int] = []
        wanted: list[FilePlan] = []
        try:
            for blob in sorted(blobs, key=lambda item: item.digest):
                key = f"f-{blob.digest.removeprefix('sha256:')}"
                os.utime(self._lock(key, "use", fcntl.LOCK_SH))  # used now: evicted last
                if path := self._blob(key, blob, repair=False):
                    found[blob.digest] = path
                    continue
                makes.append(self._lock(key, "make", fcntl.LOCK_EX))
                if path := self._blob(key, blob, repair=True):
                    found[blob.digest] = path
                else:
                    wanted.append(blob)
            if wanted:
                blob_dir = self.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
                try:
                    for digest, path in download_files(manifest_uri, wanted, blob_dir).items():
                        found[digest] = self._keep_blob(f"f-{digest.removeprefix('sha256:')}", path)
                finally:
                    rmtree(blob_dir)
        finally:
            for fd in makes:
                os.close(fd)
        say("cache", f"{len(blobs) - len(wanted)} of {len(blobs)} big files from the cache")
        return found

    def _blob(self, key: str, layer: LayerPlan | FilePlan, *, repair: bool) -> Path | None:
        """The cached blob, checked: its stat as recorded, else its sha256 again. With
        ``repair`` (the make lock is held) a refused one is removed."""
        entry = self.entries / key
        try:
            meta = self._read_meta(entry)
            data = entry / "data.tar.zst"
            st = os.lstat(data)
            if why := unsafe(st, self.owners, folder=False):
                raise Refused(f"its blob {why}")
            if _blob_stat(st) != meta.get("stat"):
                from j2c_server.unpack.fetch import _file_sha256

                if _file_sha256(data) != layer.digest.removeprefix("sha256:"):
                    raise Refused("its blob no longer matches its digest")
                meta["stat"] = _blob_stat(st)
                write_json(entry / "meta.json", meta)
                say("cache", f"blob {key[2:14]}: changed on disk, sha256 checked again: ok")
            return data
        except FileNotFoundError:
            return None
        except Refused as exc:
            if repair:
                say("cache", f"blob {key[2:14]}: entry refused ({exc}); fetching it again")
                self._remove(entry)
            return None

    def _keep_blob(self, key: str, downloaded: Path) -> Path:
        building = self._building(key)
        data = building / "data.tar.zst"
        os.replace(downloaded, data)
        os.chmod(data, 0o444)
        st = os.lstat(data)
        write_json(
            building / "meta.json", {"kind": "blob", "bytes": st.st_size, "stat": _blob_stat(st)}
        )
        os.rename(building, self.entries / key)
        return self.entries / key / "data.tar.zst"

    def _building(self, key: str) -> Path:
        """A fresh build folder for ``key`` (the make lock is held), earlier leftovers removed."""
        for leftover in self.tmp.glob(f"{key}.*"):
            say("cache", f"removing {leftover.name}, left by a build that did not finish")
            rmtree(leftover)
        building = self.tmp / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        building.mkdir(mode=0o700)
        return building

    def _build(
        self,
        item: _Item,
        blob: Path,
        interpreter: Interpreter,
        base: list[tuple[LayerPlan, Path]] | None = None,
    ) -> int:
        from j2c_server.unpack.extract import extract_layer
        from j2c_server.unpack.relocate import fix_venv, mentions, verify_venv

        building = self._building(item.key)
        tree = building / "tree"
        result = extract_layer(blob, tree, venv=item.is_venv, max_bytes=item.layer.unpacked_size)
        say(
            "extracting",
            f"{item.layer.role.value} layer: {result.entries} entries into the cache ({item.key})",
        )
        meta: dict[str, object] = {
            "kind": "tree",
            "digest": item.layer.digest,
            "built_for": str(item.built_for),
        }
        if item.is_venv and base:
            from j2c_server.unpack.base_packages import place_base

            result = replace(result, bytes=result.bytes + place_base(tree, base))
        if item.is_venv:
            old = item.layer.source_path
            moves = {} if Path(old) == item.built_for else {old: str(item.built_for)}
            changed = fix_venv(tree, interpreter, moves, home=item.built_for)
            meta["rewritten"] = changed
            meta["mentions_code"] = mentions(tree, [self._code_old])
            # Started once before it is sealed: a start-up hook that edits the venv (a site
            # .pth appending a CA to certifi's bundle, say) does so now, not in a later job,
            # where the fingerprint would refuse the entry.
            verify_venv(tree)
        read_only(tree)
        meta["fingerprint"] = fingerprint(tree, self.owners)
        meta["bytes"] = result.bytes
        write_json(building / "meta.json", meta)
        os.rename(building, self.entries / item.key)
        item.meta = meta
        return result.bytes

    # ------------------------------------------------------------------ into the job

    def _materialise(
        self, items: list[_Item], placement: Placement, interpreter: Interpreter
    ) -> Prepared:
        from j2c_server.unpack.relocate import fix_venv, verify_venv

        stage = Stage("materialising")
        homes = dict(placement.homes)
        moves = dict(placement.moves)
        said = []
        python = interpreter.executable
        env: dict[str, str] = {}
        parts = [item for item in items if not item.is_venv]
        order = {id(layer): index for index, layer in enumerate(self._code_parts)}
        parts.sort(key=lambda item: order.get(id(item.layer), 0))  # the manifest's order
        copied = 0
        for index, item in enumerate(parts):  # code first: a venv may be inside it
            tree = self.entries / item.key / "tree"
            copied += copy_tree(tree, item.home, link=False, into=index > 0)
        of = f", {len(parts)} parts" if len(parts) > 1 else ""
        said.append(f"code copied ({copied} files{of})")
        for item in items:
            if not item.is_venv:
                continue
            tree = self.entries / item.key / "tree"
            code_moved = str(placement.code) != self._code_old
            inside = item.home.is_relative_to(placement.code)
            if (
                placement.mode == "relocate"
                and not inside
                and not (code_moved and item.meta.get("mentions_code"))
            ):
                homes[LayerRole.venv] = tree
                if LayerRole.base in homes:  # shipped base packages: inside the venv's tree
                    homes[LayerRole.base] = tree / "j2c-base"
                moves[item.layer.source_path] = str(tree)
                # Python would write missing bytecode into the shared tree (root ignores modes).
                env["PYTHONDONTWRITEBYTECODE"] = "1"
                said.append(f"venv used in place at {tree}")
            else:
                files = copy_tree(tree, item.home, link=True)
                rewrite = {}
                if item.built_for != item.home:
                    rewrite[str(item.built_for)] = str(item.home)
                if code_moved:
                    rewrite[self._code_old] = str(placement.code)
                changed = 0
                if rewrite:  # rewritten files are new ones: the cache's inodes stay as they are
                    changed = fix_venv(item.home, interpreter, rewrite)
                    verify_venv(item.home)
                said.append(f"venv linked into {item.home} ({files} files, {changed} rewritten)")
            # Otherwise the venv is the entry as built and proved to run (its fingerprint says
            # so): it is not started again here.
            python = homes[LayerRole.venv] / "bin" / "python"
        stage.done("; ".join(said))
        return Prepared(replace(placement, homes=homes, moves=moves), python, env)

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
                size = int(self._read_meta(entry).get("bytes", 0))  # type: ignore[call-overload]
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
                self._remove(self.entries / key)
            except Bypass as exc:
                say("cache", f"cannot evict {key}: {exc}")
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


def _name(item: _Item) -> str:
    return f"{item.layer.role.value} layer {item.hex[:12]}"


def _recent(path: Path) -> bool:
    """Younger than an hour: perhaps still being written by a running job."""
    with contextlib.suppress(OSError):
        return time.time() - os.lstat(path).st_mtime < 3600
    return False


def _blob_stat(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]
