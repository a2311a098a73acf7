"""The node cache's tree entries: layers extracted (and a venv relocated and proved to run) into
the cache, then given to the job: the code copied, the venv used in place or linked.

Called by :meth:`.cache.Cache.prepare` with the make locks of the entries it builds held; an
entry is built under ``tmp/`` and renamed into ``entries/`` only when complete, its files made
read-only and their fingerprint recorded (:mod:`.files`).

How a job uses a venv entry: in relocate mode it runs **in place** (read-only, at
``entries/<key>/tree``) unless it lives inside the project or embeds the project's path
(editable installs). At original paths the entry was relocated for exactly that path, so it is
used where it is too: the job's home gets one symlink per top-level entry of the tree (``bin``,
``lib``, ``pyvenv.cfg``...), and ``sys.prefix`` is the home. Otherwise (files name another path)
the tree is **materialised** into the job's home by hard links (copies across filesystems), then
the few files that name another path are rewritten, each one replaced by a new file (a rename),
so the cache's inodes are never written. Cached files have no write bits: a job that writes a
venv file gets EACCES; one that chmods it first changes its mode or mtime, which the fingerprint
catches at the next use. A venv used from the cache's tree runs with
``PYTHONDONTWRITEBYTECODE=1`` (root ignores the modes; new bytecode would change the tree).
The code layer is always **copied** (the job's working tree is its own and writable); a code
layer in parts (format_version 3) has one ``code-<hex>`` entry per part, copied one after the
other into the same folder. A venv entry
is started once when it is built (before it is sealed) and not again while its fingerprint and
the interpreter binary are the same; a materialised copy, whose files were rewritten, is
started again.
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
    """Build the entries of ``made`` (their make locks held): their blobs found or downloaded,
    then each one extracted, the code first. ``base``: the shipped lab-base packages, placed
    into the venv's entry; ``code_old``: the code layer's source path."""
    from j2c_server.unpack.cache.blobs import layer_blobs
    from j2c_server.unpack.space import check_free_space

    blob_dir = cache.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
    base = base if any(item.is_venv for item in made) else []
    check_free_space([*(item.layer for item in made), *base], placement, blob_dir)
    blobs = layer_blobs(cache, manifest_uri, [*(item.layer for item in made), *base], blob_dir)
    base_blobs = [(x, blobs[x.digest.removeprefix("sha256:")]) for x in base]
    stage = Stage("extracting")
    total = 0
    for item in sorted(made, key=lambda i: i.is_venv):
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
        meta["mentions_code"] = mentions(tree, [code_old])
        # Started once before it is sealed: a start-up hook that edits the venv (a site
        # .pth appending a CA to certifi's bundle, say) does so now, not in a later job,
        # where the fingerprint would refuse the entry.
        verify_venv(tree)
    read_only(tree)
    meta["fingerprint"] = fingerprint(tree, cache.owners)
    meta["bytes"] = result.bytes
    write_json(building / "meta.json", meta)
    os.rename(building, cache.entries / item.key)
    item.meta = meta
    return result.bytes


def materialise(
    cache: Cache,
    items: list[CacheItem],
    placement: Placement,
    interpreter: Interpreter,
    *,
    code_parts: list[LayerPlan],
    code_old: str,
) -> Prepared:
    """The job's layers from their entries: the code copied (its parts in the manifest's
    order, ``code_parts``), the venv used in place or linked into its home. The relocation is
    imported only for a venv whose files must be rewritten (a warm start needs none of it)."""
    stage = Stage("materialising")
    homes = dict(placement.homes)
    moves = dict(placement.moves)
    said = []
    python = interpreter.executable
    env: dict[str, str] = {}
    parts = [item for item in items if not item.is_venv]
    order = {id(layer): index for index, layer in enumerate(code_parts)}
    parts.sort(key=lambda item: order.get(id(item.layer), 0))  # the manifest's order
    copied = 0
    for index, item in enumerate(parts):  # code first: a venv may be inside it
        tree = cache.entries / item.key / "tree"
        copied += copy_tree(tree, item.home, link=False, into=index > 0)
    of = f", {len(parts)} parts" if len(parts) > 1 else ""
    said.append(f"code copied ({copied} files{of})")
    for item in items:
        if not item.is_venv:
            continue
        tree = cache.entries / item.key / "tree"
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
            # Files must be rewritten for this path: a tree of its own, hard-linked (copied
            # across filesystems), each rewritten file a new one (the cache's inodes stay as
            # they are), then proved to run.
            from j2c_server.unpack.relocate import fix_venv, verify_venv

            files = copy_tree(tree, item.home, link=True)
            rewrite = {}
            if item.built_for != item.home:
                rewrite[str(item.built_for)] = str(item.home)
            if code_moved:
                rewrite[code_old] = str(placement.code)
            changed = fix_venv(item.home, interpreter, rewrite)
            verify_venv(item.home)
            said.append(f"venv linked into {item.home} ({files} files, {changed} rewritten)")
        python = homes[LayerRole.venv] / "bin" / "python"
    stage.done("; ".join(said))
    return Prepared(replace(placement, homes=homes, moves=moves), python, env)
