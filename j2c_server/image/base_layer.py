"""Lab-base distributions that travel with the job: which ship (:func:`select`) and their layers
(:func:`add_base_layers`).

A ``--system-site-packages`` venv lets pip skip what the lab's base Python already has; when the
job's image lacks some of it (the image report's ``missing``), those distributions ship as
their own content-addressed layer (``LayerRole.base``, manifest format 4): their files as the
distribution's RECORD lists them (``importlib.metadata`` ``files()``), relative to the site
folder they are installed in, one layer per such folder. Bytecode (``__pycache__/``, ``.pyc``)
stays home: the image's Python writes its own. Files RECORD places outside the site folder
(console scripts, headers, ``data`` files) are left out and named in the report: the import
path is what is shipped, not the lab's ``bin/``.

A needed base distribution the image has at another version (``versions``) follows the job's
choice: ``ship`` the lab's, keep the ``image``'s, or ``auto`` (the default: the lab's only where
the image's fails a requirement of the job's packages, docs/images.md says why). A shipped
version that fails a requirement of one of the image's own distributions would break the image
(``breaks_image``): the send refuses it unless the job confirms (``force_base``).

The layer is fingerprinted and cached like the venv layer (pack/fingerprint.py: by the stat of
every file, none read), so an unchanged base is neither packed nor uploaded twice.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from j2c_server.core.errors import PackError
from j2c_server.core.units import byte_size
from j2c_server.image.diff import _holds as requirement_holds
from j2c_server.image.diff import marker_env, requirements
from j2c_server.image.needs import LabDist, lab_dists
from j2c_server.pack.fingerprint import LayerCache
from j2c_server.pack.models import PackResult, PackSpec
from j2c_server.pack.scan import DIR, FILE, SYMLINK, Entry, ScannedLayer
from j2c_server.pack.venv import normalize_dist_name, open_venv
from j2c_server.wire.image import (
    BaseConflicts,
    BrokenRequirement,
    ImageInventory,
    MissingDist,
    ShippedBase,
    VersionDifference,
)
from j2c_server.wire.manifest import LayerRole

SHIPPED_FORMAT = 4  # the manifest format that carries base layers (MANIFEST_FORMAT_VERSION_...)
SKIPPED_SHOWN = 10
DIR_MODE = 0o755


@dataclass(frozen=True)
class ShipChoice:
    """What the settings and the job say about shipping the lab's base."""

    enabled: bool = True
    off_by: str | None = None  # "pack.ship_base_packages is off", "--no-ship-base"
    conflicts: BaseConflicts = "auto"
    force: bool = False


@dataclass(frozen=True)
class DistFiles:
    """One distribution's files to ship, relative to its site folder."""

    site: Path
    files: tuple[str, ...]
    skipped: tuple[str, ...]  # outside the site folders (or with no file list at all)
    bytes: int
    elsewhere: tuple[tuple[Path, str], ...] = ()  # in another site folder (purelib/platlib)


_files_memo: dict[tuple[str, int, tuple[Path, ...]], DistFiles] = {}


def _bytecode(rel: str) -> bool:
    return rel.endswith((".pyc", ".pyo")) or "__pycache__" in rel.split("/")


def _other_site(path: str, folders: tuple[Path, ...], site: Path) -> tuple[Path, str] | None:
    """The other base site folder holding ``path`` (where purelib and platlib are apart)."""
    for folder in folders:
        if folder != site and Path(path).is_relative_to(folder):
            return folder, Path(path).relative_to(folder).as_posix()
    return None


def dist_files(dist: LabDist, folders: tuple[Path, ...] = ()) -> DistFiles:
    """The files of ``dist`` by its RECORD: inside its site folder (or another of the base's
    ``folders``), without bytecode, that exist (memoised by the RECORD's mtime)."""
    site = dist.path.parent
    try:
        mtime = os.stat(dist.path / "RECORD").st_mtime_ns
    except OSError:
        mtime = -1
    memo = (str(dist.path), mtime, folders)
    if memo in _files_memo:
        return _files_memo[memo]
    listed = metadata.PathDistribution(dist.path).files
    if listed is None:
        found = DistFiles(site, (), (f"{dist.label}: no RECORD, nothing of it shipped",), 0)
        _files_memo[memo] = found
        return found
    files: list[str] = []
    skipped: list[str] = []
    total = 0
    seen: set[str] = set()
    elsewhere: list[tuple[Path, str]] = []
    for item in listed:
        text = str(item).replace(os.sep, "/")
        rel = posixpath.normpath(text)
        if rel.startswith("/") or rel == ".." or rel.startswith("../"):
            other = _other_site(posixpath.normpath(posixpath.join(str(site), text)), folders, site)
            if other is None or _bytecode(other[1]) or not os.path.isfile(other[0] / other[1]):
                if other is None:
                    skipped.append(f"{dist.label}: {text}")
                continue
            elsewhere.append(other)
            total += os.lstat(other[0] / other[1]).st_size
            continue
        if _bytecode(rel) or rel in seen:
            continue
        try:
            st = os.lstat(site / rel)
        except OSError:
            continue  # listed but gone (removed by hand): nothing to ship
        if not (os.path.isfile(site / rel) or os.path.islink(site / rel)):
            continue
        seen.add(rel)
        files.append(rel)
        total += st.st_size
    found = DistFiles(site, tuple(sorted(files)), tuple(skipped), total, tuple(elsewhere))
    _files_memo[memo] = found
    return found


def _key(name: str) -> str:
    return normalize_dist_name(name)


def _too_old(inventory: ImageInventory) -> str | None:
    """Why the image's j2c-unpack cannot place base layers, when it says so."""
    if inventory.j2c_version is None:
        return None  # a probe: the image's j2c-unpack has not said its version yet
    reads = inventory.reads_manifest_format
    if reads is not None and reads >= SHIPPED_FORMAT:
        return None
    says = f"manifest format {reads}" if reads else "no manifest format (older than 4)"
    return (
        f"the image's j2c-unpack (j2c {inventory.j2c_version}, reads {says}) is too old for "
        f"shipped base packages (format {SHIPPED_FORMAT}): install a newer j2c in the image"
    )


def select(
    missing: list[MissingDist],
    versions: list[VersionDifference],
    base: dict[str, LabDist],
    inventory: ImageInventory,
    choice: ShipChoice,
    has_venv: bool,
    folders: list[Path] | None = None,
) -> ShippedBase | None:
    """What ships for one job, with why not when nothing does; None when nothing would."""
    if choice.conflicts == "ship":
        chosen = list(versions)
    elif choice.conflicts == "image":
        chosen = []
    else:  # auto: the lab's version where the image's fails a requirement of the job's
        chosen = [item for item in versions if item.broken]
    if not missing and not chosen and not versions:
        return None
    kept = [item for item in versions if item not in chosen]
    shipping = ShippedBase(
        enabled=choice.enabled,
        conflicts=choice.conflicts,
        shipped_conflicts=[f"{v.name} {v.lab_version}" for v in chosen],
        image_conflicts=[f"{v.name} {v.image_version}" for v in kept],
        forced=choice.force,
    )
    if not missing and not chosen:
        return shipping
    off = choice.off_by if not choice.enabled else None
    if off is None and not has_venv:
        off = "the job has no venv to put them on"
    if off is None:
        off = _too_old(inventory)
    if off is not None:
        return shipping.model_copy(update={"enabled": False, "off_reason": off})
    names = [*(m.name for m in missing), *(v.name for v in chosen)]
    dists = [base[_key(name)] for name in names if _key(name) in base]
    found = [dist_files(dist, tuple(folders or ())) for dist in dists]
    skipped = [line for item in found for line in item.skipped]
    lab_versions = {dist.key: dist for dist in dists}
    image_names = {_key(d.name) for d in inventory.distributions}
    env = marker_env(inventory)
    breaks = [
        BrokenRequirement(by=f"{theirs.name} {theirs.version}", requirement=str(req))
        for theirs in inventory.distributions
        if _key(theirs.name) not in lab_versions  # an image dist replaced too: its needs go
        for req in requirements(theirs.requires, env)
        if _key(req.name) in lab_versions
        and _key(req.name) in image_names
        and not requirement_holds(req, lab_versions[_key(req.name)].version)
    ]
    return shipping.model_copy(
        update={
            "names": [dist.label for dist in dists],
            "bytes": sum(item.bytes for item in found),
            "files": sum(len(item.files) + len(item.elsewhere) for item in found),
            "breaks_image": breaks,
            "skipped_files": skipped,
            "note": None
            if inventory.j2c_version
            else "the image's j2c-unpack has not said its version yet (probed): one older "
            "than format 4 refuses the job with a clear message",
        }
    )


def refuse_if_it_breaks_the_image(
    shipping: ShippedBase | None, packed_bytes: int = 0, hard_limit_bytes: int = 0
) -> None:
    """The send stops here, before anything is uploaded, unless the job confirmed; also when
    the shipped base takes the send past the hard limit (``pack.hard_limit_mb``)."""
    if shipping is None or not shipping.enabled:
        return
    total = packed_bytes + shipping.bytes
    if hard_limit_bytes and shipping.names and total > hard_limit_bytes:
        raise PackError(
            f"the lab's base packages the image lacks ({byte_size(shipping.bytes)}: "
            f"{', '.join(shipping.names[:5])}{' …' if len(shipping.names) > 5 else ''}) take "
            f"this send to {byte_size(total)}, past the hard limit of "
            f"{byte_size(hard_limit_bytes)}",
            field="ship_base",
            hint="install them in the image (or the venv), send without them (--no-ship-base), "
            "or raise pack.hard_limit_mb",
        )
    if not shipping.breaks_image or shipping.forced:
        return
    first = shipping.breaks_image[0]
    more = len(shipping.breaks_image) - 1
    raise PackError(
        f"shipping the lab's {', '.join(shipping.shipped_conflicts)} would break the image's "
        f"own packages: {first.by} needs {first.requirement}"
        + (f" (and {more} more)" if more else ""),
        field="base_conflicts",
        hint="use the image's versions (--base-conflicts image), or confirm (--force-base)",
    )


# ---------------------------------------------------------------------- the layers


def _entries(site: Path, files: list[str]) -> list[Entry]:
    """``files`` (relative to ``site``) and their folders, in walk order (a folder before
    what it holds). Folders carry mtime 0: they are made for the layer, not the lab's."""
    folders: set[str] = set()
    for rel in files:
        parent = posixpath.dirname(rel)
        while parent and parent not in folders:
            folders.add(parent)
            parent = posixpath.dirname(parent)
    entries: list[Entry] = []
    for rel in sorted([*folders, *files], key=lambda r: r.split("/")):
        if rel in folders:
            entries.append(Entry(rel, DIR, DIR_MODE, 0, 0))
            continue
        st = os.lstat(site / rel)
        if os.path.islink(site / rel):
            entries.append(Entry(rel, SYMLINK, 0o777, 0, st.st_mtime_ns, os.readlink(site / rel)))
            continue
        mode = st.st_mode & 0o777
        entries.append(Entry(rel, FILE, mode, st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino))
    return entries


def lab_base(venv_path: Path) -> tuple[dict[str, LabDist], list[Path]]:
    """The distributions of the venv's base interpreter (what ``--system-site-packages`` adds),
    and its site folders in ``sys.path`` order."""
    venv = open_venv(venv_path)
    folders = [Path(p) for p in venv.base.paths] if venv.base else []
    return lab_dists(folders), folders


def base_layers_scanned(
    shipping: ShippedBase, base: dict[str, LabDist], folders: list[Path]
) -> list[ScannedLayer]:
    """The layers of what ``shipping`` names: one per lab site folder, in ``folders`` order."""
    by_site: dict[Path, list[str]] = {}
    for label in shipping.names:
        name = label.rsplit(" ", 1)[0]
        dist = base.get(_key(name))
        if dist is None:
            raise PackError(
                f"{label} was to ship from the lab's base Python but is no longer there",
                field="venv_path",
            )
        found = dist_files(dist, tuple(folders))
        by_site.setdefault(found.site, []).extend(found.files)
        for other, rel in found.elsewhere:
            by_site.setdefault(other, []).append(rel)
    order = {folder: index for index, folder in enumerate(folders)}
    return [
        ScannedLayer(role=LayerRole.base, root=site, entries=_entries(site, sorted(set(files))))
        for site, files in sorted(by_site.items(), key=lambda kv: order.get(kv[0], len(order)))
    ]


def add_base_layers(
    result: PackResult,
    shipping: ShippedBase | None,
    spec: PackSpec,
    cache_dir: Path,
    base: tuple[dict[str, LabDist], list[Path]] | None = None,
) -> PackResult:
    """``result`` with the base layers of ``shipping`` (packed, or reused by fingerprint).
    ``base``: the lab base's distributions and site folders (default: the venv's base)."""
    from j2c_server.pack.packer import _pack_layer

    if shipping is None or not shipping.enabled or not shipping.names or spec.venv_path is None:
        return result
    cache = LayerCache(
        cache_dir, max_bytes=spec.layer_cache_max_bytes, keep_sends=spec.layer_cache_keep_sends
    )
    started_ns = time.time_ns()
    started = time.perf_counter()
    packed = []
    dists, folders = base if base is not None else lab_base(spec.venv_path)
    for scanned in base_layers_scanned(shipping, dists, folders):
        try:
            layer, _changed = _pack_layer(scanned, spec, cache, started_ns, None)
        except OSError as exc:
            raise PackError(
                f"cannot pack the lab's base packages: {exc.filename}: {exc.strerror}",
                field="venv_path",
            ) from None
        packed.append(layer)
    code = result.code_parts()
    if code:  # this send's blobs, base included, kept with the project's last sends
        with contextlib.suppress(OSError):
            blobs = [p.path for p in [*result.layers, *packed]] + [f.path for f in result.files]
            cache.remember_send(Path(code[0].layer.source_path), blobs, amend=True)
    seconds = result.seconds + time.perf_counter() - started
    return result.model_copy(update={"layers": [*result.layers, *packed], "seconds": seconds})


def shipping_line(shipping: ShippedBase, target: str) -> str:
    """'shipping 3 packages from the lab's base Python that image X lacks: a, b, c — 41 MB'."""
    names = [label.rsplit(" ", 1)[0] for label in shipping.names]
    count = len(names)
    return (
        f"shipping {count} package{'s' if count != 1 else ''} from the lab's base Python that "
        f"{target} lacks: {', '.join(names)} — {byte_size(shipping.bytes)}"
    )
