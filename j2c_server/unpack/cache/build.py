"""The node cache's venv entries: a venv layer extracted, relocated and proved to run in the
cache, then given to the job with its code.

Called by :meth:`.node.Cache.prepare` with the make locks of the entries it builds held; an
entry is built under ``tmp/`` and renamed into ``entries/`` only when complete, its files made
read-only and their fingerprint recorded (:mod:`.files`).

The code layer is **extracted** into the job's code folder from its blobs, which
:func:`.blobs.layer_blobs` copied into the job's own folder as it hashed them (a code layer in
parts, format_version 3: one blob per part, extracted in the manifest's order into the same
folder): it is the job's working tree, writable, and exactly the manifest's bytes.

How a job uses a venv entry: in relocate mode it runs **in place** (read-only, at
``entries/<key>/tree``) unless it lives inside the project or embeds the project's path
(editable installs). At original paths the entry was relocated for exactly that path, so it is
used where it is too: the job's home gets one symlink per top-level entry of the tree (``bin``,
``lib``, ``pyvenv.cfg``...), and ``sys.prefix`` is the home. Otherwise (files name another path)
the tree is **materialised** into the job's home by copies (reflinks where the filesystem has
them; never hard links, which would move the cached files' ctime, part of their fingerprint),
then the few files that name another path are rewritten. Cached files have no write bits: a job
that writes a venv file gets EACCES; one that chmods it first changes its mode and ctime, which
the fingerprint catches at the next use. A venv used from the cache's tree runs with
``PYTHONDONTWRITEBYTECODE=1`` (root ignores the modes; new bytecode would change the tree).
A venv entry is started once when it is built (before it is sealed) and not again while its
fingerprint and the interpreter binary are the same; a materialised copy, whose files were
rewritten, is started again.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.manifest_plan import LayerPlan, LayerRole
from j2c_server.core.units import byte_size
from j2c_server.unpack.cache.files import (
    copy_tree,
    fingerprint,
    link_top,
    read_only,
    write_json,
)
from j2c_server.unpack.homes import Placement
from j2c_server.unpack.interpreter import Interpreter
from j2c_server.unpack.log import Stage, say

if TYPE_CHECKING:
    from j2c_server.unpack.cache.node import Cache, CacheItem


@dataclass(frozen=True)
class Prepared:
    placement: Placement  # the venv's home may now be inside the cache
    python: Path
    env: dict[str, str] = field(default_factory=dict)  # for the job, on top of its own


def build_entries(
    cache: Cache,
    manifest_uri: str,
    made: list[CacheItem],
    placement: Placement,
    interpreter: Interpreter,
    *,
    base: list[LayerPlan],
    code_old: str,
) -> None:
    """Build the venv entries of ``made`` (their make locks held): their blobs found (hashed)
    or downloaded, then each one extracted. ``base``: the shipped lab-base packages, placed
    into the venv's entry; ``code_old``: the code layer's source path."""
    from j2c_server.unpack.cache.blobs import layer_blobs
    from j2c_server.unpack.space import check_free_space

    blob_dir = cache.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
    check_free_space([*(item.layer for item in made), *base], placement, blob_dir)
    blobs, _ = layer_blobs(cache, manifest_uri, [*(item.layer for item in made), *base], blob_dir)
    base_blobs = [(x, blobs[x.digest.removeprefix("sha256:")]) for x in base]
    stage = Stage("extracting")
    total = 0
    for item in made:
        total += _build(cache, item, blobs[item.hex], interpreter, base_blobs, code_old)
    stage.done(f"{byte_size(total)} written into the cache")


def _build(
    cache: Cache,
    item: CacheItem,
    blob: Path,
    interpreter: Interpreter,
    base: list[tuple[LayerPlan, Path]],
    code_old: str,
) -> int:
    from j2c_server.unpack.extract import extract_layer
    from j2c_server.unpack.relocate import fix_venv, mentions, verify_venv

    building = cache.building(item.key)
    tree = building / "tree"
    result = extract_layer(blob, tree, venv=True, max_bytes=item.layer.unpacked_size)
    say("extracting", f"venv layer: {result.entries} entries into the cache ({item.key})")
    meta: dict[str, object] = {
        "kind": "tree",
        "digest": item.layer.digest,
        "built_for": str(item.built_for),
    }
    if base:
        from j2c_server.unpack.base_packages import place_base

        result = replace(result, bytes=result.bytes + place_base(tree, base))
    old = item.layer.source_path
    moves = {} if Path(old) == item.built_for else {old: str(item.built_for)}
    changed = fix_venv(tree, interpreter, moves, home=item.built_for)
    meta["rewritten"] = changed
    meta["mentions_code"] = mentions(tree, [code_old])
    # Started once before it is sealed: a start-up hook that edits the venv (a site .pth
    # appending a CA to certifi's bundle, say) does so now, not in a later job, where the
    # fingerprint would refuse the entry.
    verify_venv(tree)
    read_only(tree)
    meta["fingerprint"] = fingerprint(tree, cache.owners)
    meta["bytes"] = result.bytes
    write_json(building / "meta.json", meta)
    os.rename(building, cache.entries / item.key)
    item.meta = meta
    return result.bytes


def materialise(
    items: list[CacheItem],
    placement: Placement,
    interpreter: Interpreter,
    *,
    code: list[tuple[LayerPlan, Path]],
    code_old: str,
) -> Prepared:
    """The job's layers: the code extracted from its verified blobs (``code``: each part and
    the job's own copy of its blob, in the manifest's order), the venv used in place or linked
    into its home. The relocation is imported only for a venv whose files must be rewritten (a
    warm start needs none of it)."""
    from j2c_server.unpack.extract import extract_layer

    stage = Stage("materialising")
    homes = dict(placement.homes)
    moves = dict(placement.moves)
    said = []
    python = interpreter.executable
    env: dict[str, str] = {}
    entries = 0
    for index, (part, blob) in enumerate(code):  # code first: a venv may be inside it
        done = extract_layer(blob, placement.code, max_bytes=part.unpacked_size, into=index > 0)
        entries += done.entries
    of = f", {len(code)} parts" if len(code) > 1 else ""
    said.append(f"code extracted from its verified blob ({entries} entries{of})")
    for item in items:
        tree = item.tree
        code_moved = str(placement.code) != code_old
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
        elif item.built_for == item.home and not code_moved:
            # Relocated for exactly this path (original paths) and proved to run when it was
            # built; its fingerprint matched just now: seen at its home through one symlink per
            # top-level entry, used where it is, like an in-place venv. Not started again.
            links = link_top(tree, item.home)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            said.append(f"venv at {item.home}: {links} links into the cache entry {tree}")
        else:
            # Files must be rewritten for this path: a tree of its own, copied (never hard
            # links: a link moves the cached file's ctime, which its fingerprint holds), then
            # proved to run.
            from j2c_server.unpack.relocate import fix_venv, verify_venv

            files = copy_tree(tree, item.home)
            rewrite = {}
            if item.built_for != item.home:
                rewrite[str(item.built_for)] = str(item.home)
            if code_moved:
                rewrite[code_old] = str(placement.code)
            changed = fix_venv(item.home, interpreter, rewrite)
            verify_venv(item.home)
            said.append(f"venv copied into {item.home} ({files} files, {changed} rewritten)")
        python = homes[LayerRole.venv] / "bin" / "python"
    stage.done("; ".join(said))
    return Prepared(replace(placement, homes=homes, moves=moves), python, env)
