"""Inventories kept in the data dir, one file per target key: ``<data>/images/<hash>.json``.

A file holds the key, where the inventory came from (``probe``: the engine ran the image;
``job``: a job's ``j2c-unpack`` said it in its log; ``operator``: ``j2c image inventory``), when
it was stored, and the inventory. The data dir is the user's own (0700, :mod:`..private`), so an
inventory found here came from this user's jobs or commands: nothing another tenant could write
is ever read. A newer inventory for a key replaces the older one; an unreadable or invalid file
is a miss (the target is then "not known yet").
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from j2c_server.core.file_modes import private_dir, write_private_text
from j2c_server.wire.image import ImageInventory

Source = Literal["probe", "job", "operator"]


@dataclass(frozen=True)
class Stored:
    key: str
    source: Source
    stored_at: float
    inventory: ImageInventory


class InventoryStore:
    def __init__(self, data_dir: Path) -> None:
        self.folder = data_dir / "images"

    def _path(self, key: str) -> Path:
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def get(self, key: str) -> Stored | None:
        try:
            raw = json.loads(self._path(key).read_text())
            if raw.get("key") != key:
                return None  # a hash collision, or a file copied in by hand
            return Stored(
                key,
                raw["source"],
                float(raw["stored_at"]),
                ImageInventory.model_validate(raw["inventory"]),
            )
        except (OSError, ValueError, KeyError, TypeError, ValidationError):
            return None

    def put(self, key: str, inventory: ImageInventory | dict[str, Any], source: Source) -> Stored:
        """Keep ``inventory`` for ``key`` (validated first: a bad one raises ValidationError)."""
        checked = (
            inventory
            if isinstance(inventory, ImageInventory)
            else ImageInventory.model_validate(inventory)
        )
        stored = Stored(key, source, time.time(), checked)
        record = {
            "key": key,
            "source": source,
            "stored_at": stored.stored_at,
            "inventory": checked.model_dump(mode="json"),
        }
        private_dir(self.folder)
        path = self._path(key)
        # Written aside, then renamed: a reader never sees half a file.
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        write_private_text(temporary, json.dumps(record))
        os.replace(temporary, path)
        return stored
