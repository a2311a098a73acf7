"""Archive entry names, and big files' paths, as j2c-unpack accepts them: relative, without
``..``, at most :data:`MAX_DEPTH` folders deep and :data:`MAX_NAME_BYTES` long. Its own module
(no tarfile, no zstandard) so that checking a manifest's big files costs no extractor import.
"""

from __future__ import annotations

from j2c_server.unpack.errors import UnsafeEntry

MAX_DEPTH = 256
MAX_NAME_BYTES = 4095


def relative_name(name: str, entry: str) -> str:
    """``name`` relative to the target ('' for the root); UnsafeEntry (naming ``entry``) when it
    is absolute or climbs with '..'. ``name`` is the entry's own name or its hard link's target.
    """
    what = f"entry {entry!r}" if name == entry else f"entry {entry!r} links to {name!r}, which"
    if name.startswith("/"):
        raise UnsafeEntry(f"{what} has an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeEntry(f"{what} has a '..' component")
    if len(parts) > MAX_DEPTH or len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        label = f"entry {_short(entry)!r}" + ("" if name == entry else " links to a name that")
        raise UnsafeEntry(
            f"{label} is {len(parts)} folders deep and {len(name)} characters long "
            f"(at most {MAX_DEPTH} and {MAX_NAME_BYTES} are extracted)"
        )
    return "/".join(parts)


def _short(name: str) -> str:
    return name if len(name) <= 80 else f"{name[:40]}...{name[-20:]}"
