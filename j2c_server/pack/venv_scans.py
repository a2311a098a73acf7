"""A venv's scan kept between sends in a long-lived process, for as long as a watch vouches for it.

A send scans the project and the venv (:func:`.plan.prepare`). The venv is most of the entries
(12.7k of 14k in the benchmark) and changes only when something is installed, so a pack worker
that lives across sends (the server's, a kernel's) keeps each venv's :class:`.scan.ScannedLayer`
with a :class:`.tree_watch.TreeWatch` set before it was scanned, and hands the same layer back
while the watch reports nothing. The project is scanned every time: its files are the ones a
user edits in every way (memory-mapped data included, which inotify cannot see).

A CLI send is a new process: it has no kept scan and walks as before. Kept scans are bounded in
number and in age (:data:`TRUST_S`, a bound on any miss the watch could not know of).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from j2c_server.pack.scan import ScannedLayer
from j2c_server.pack.tree_watch import TreeWatch

TRUST_S = 15 * 60.0  # a kept scan older than this is walked again, watch or not
KEPT = 4  # venvs kept per process (one per project a user sends from, usually)


@dataclass
class _Kept:
    key: tuple[object, ...]
    watch: TreeWatch
    layer: ScannedLayer
    at: float


class VenvScans:
    """Kept venv scans of one process; not thread-safe (one pack worker serves one request at
    a time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._clock = clock
        self.hits = 0  # for tests and benchmarks: scans answered from a kept one

    def scan(
        self, root: Path, key: tuple[object, ...], walk: Callable[[], ScannedLayer]
    ) -> ScannedLayer:
        """The venv at ``root`` scanned with the rules that ``key`` stands for: the kept scan
        when its watch saw nothing, else ``walk()`` run after a fresh watch is set."""
        name = str(root)
        kept = self._kept.get(name)
        if kept is not None and self._holds(kept, root, key):
            self._kept.move_to_end(name)
            self.hits += 1
            return kept.layer
        if kept is not None:
            self._drop(name)
        watch = TreeWatch.start(root)
        layer = walk()  # after the watch: a change during the walk shows at the next send
        if watch is not None:
            self._kept[name] = _Kept(key, watch, layer, self._clock())
            while len(self._kept) > KEPT:
                self._drop(next(iter(self._kept)))
        return layer

    def _holds(self, kept: _Kept, root: Path, key: tuple[object, ...]) -> bool:
        if kept.key != key or self._clock() - kept.at > TRUST_S:
            return False
        try:
            if root.resolve(strict=True) != kept.watch.root:  # the path names another folder
                return False
        except OSError:
            return False
        return not kept.watch.changed()

    def _drop(self, name: str) -> None:
        self._kept.pop(name).watch.close()

    def close(self) -> None:
        for name in list(self._kept):
            self._drop(name)
