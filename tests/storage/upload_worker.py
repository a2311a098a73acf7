"""Uploads one file with j2c's S3 store and prints a line per finished part (run as a script).

The interruption test starts it, kills it mid-upload, and checks that the next run resumes.
Usage: python upload_worker.py <store url> <settings json> <key> <file>
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from j2c_server.config import StorageSettings
from j2c_server.storage import open_store


async def main(url: str, settings_json: str, key: str, path: str) -> None:
    store = open_store(url, StorageSettings.model_validate_json(settings_json))

    def report(moved: int) -> None:
        print(f"part {moved}", flush=True)

    try:
        await store.put_file(key, Path(path), progress=report)
    finally:
        await store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
