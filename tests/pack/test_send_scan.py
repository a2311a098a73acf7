"""One walk per send: the scan that decides on a job is the walk its layers are packed from, and
the walk files behind the fingerprints say which files changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from j2c_server.jobs.pack_worker import PackWorkers, Scan
from j2c_server.pack import PackResult, PackSpec
from tests.support.jobs import settle


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (root / "data.txt").write_text("1 2 3\n")
    settle(root)
    return root


async def _scan_then_pack(
    spec: PackSpec, cache: Path, add_after_scan: Path | None, *, reuse: bool
) -> tuple[Scan, PackResult]:
    workers = PackWorkers(2)
    try:
        scan = await workers.scan(spec, cache)
        if add_after_scan is not None:
            add_after_scan.write_text("late\n")
        result, _ = await workers.pack(spec, cache, scan=scan if reuse else None)
        return scan, result
    finally:
        await workers.close()


def test_pack_uses_the_sends_walk_instead_of_walking_again(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    spec = PackSpec(code_path=root, call_path="train.py")
    late = root / "late.txt"
    scan, result = asyncio.run(_scan_then_pack(spec, tmp_path / "cache", late, reuse=True))
    # A file made after the send's scan is not in the layer: the pack did not walk again.
    assert result.layers[0].layer.files == 2
    assert scan.report.plan.layers[0].files == 2


def test_without_the_sends_walk_the_pack_walks_again(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    spec = PackSpec(code_path=root, call_path="train.py")
    late = root / "late.txt"
    _, result = asyncio.run(_scan_then_pack(spec, tmp_path / "cache", late, reuse=False))
    assert result.layers[0].layer.files == 3


def test_the_scan_names_the_files_changed_since_earlier_fingerprints(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    spec = PackSpec(code_path=root, call_path="train.py")
    cache = tmp_path / "cache"

    async def twice() -> tuple[dict[str, str], list[tuple[str, str]], int]:
        workers = PackWorkers(1)
        try:
            before = (await workers.scan(spec, cache)).report.content
            (root / "train.py").write_text("print('hello')\n")
            (root / "data.txt").unlink()
            (root / "new.py").write_text("x = 1\n")
            settle(root)
            after = (await workers.scan(spec, cache, compare=before)).report
            return before, [(c.path, c.change) for c in after.changes], after.changed_files
        finally:
            await workers.close()

    before, changes, count = asyncio.run(twice())
    assert before.keys() == {"code"}
    assert changes == [("data.txt", "removed"), ("new.py", "added"), ("train.py", "changed")]
    assert count == 3
