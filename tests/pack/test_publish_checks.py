"""What a send asks the store: each blob once, the blobs no earlier send saw first, and never
less because of an earlier send (a blob deleted since goes up again before the manifest)."""

from __future__ import annotations

from pathlib import Path

from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import FileStore, blob_key
from j2c_server.storage.base import ProgressFn
from j2c_server.wire.manifest import LayerRole
from tests.support.projects import make_venv, write


class CountingStore(FileStore):
    """A folder store that records what it was asked and sent, in order."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.asked: list[str] = []
        self.sent: list[str] = []

    async def size(self, key: str) -> int | None:
        self.asked.append(key)
        return await super().size(key)

    async def _store_file(
        self, key: str, path: Path, size: int, progress: ProgressFn | None
    ) -> None:
        self.sent.append(key)
        await super()._store_file(key, path, size, progress)


async def test_an_edit_is_asked_for_first_and_each_blob_once(
    project: Path, cache: Path, tmp_path: Path
) -> None:
    venv = make_venv(tmp_path / "venv")
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv)
    store = CountingStore(tmp_path / "store")
    first = pack(spec, cache)
    await publish(store, first, make_manifest(first))
    # The venv changes, the code does not: the venv layer (listed last) is the one to ask first.
    write(next(venv.glob("lib/python*/site-packages")) / "added.py", "X = 1\n")
    second = pack(spec, cache)
    store.asked.clear()
    published = await publish(store, second, make_manifest(second))
    changed = second.layer(LayerRole.venv)
    assert changed is not None
    assert published.uploaded == [LayerRole.venv]
    assert store.asked[0] == blob_key(changed.layer.digest)
    assert sorted(store.asked) == sorted(
        {blob_key(p.layer.digest) for p in second.layers} | {published.manifest_key}
    )


async def test_a_blob_deleted_since_the_previous_send_goes_up_again(
    spec: PackSpec, cache: Path, tmp_path: Path
) -> None:
    store = CountingStore(tmp_path / "store")
    result = pack(spec, cache)
    manifest = make_manifest(result)
    await publish(store, result, manifest)
    venv = result.layer(LayerRole.venv)
    assert venv is not None
    await store.delete(blob_key(venv.layer.digest))
    store.sent.clear()
    again = await publish(store, result, manifest)
    assert again.uploaded == [LayerRole.venv]
    assert store.sent == [blob_key(venv.layer.digest)]
    assert await store.size(blob_key(venv.layer.digest)) == venv.layer.size
