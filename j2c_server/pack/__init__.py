"""Stages 1-2 of the pipeline: scan a project and its venv, pack them into content-addressed
``tar.zst`` layers, describe them in a manifest, and publish both to an object store.

``preflight`` and ``pack`` are synchronous (callers on an event loop use ``asyncio.to_thread``);
``publish`` is async. See ``docs/packing.md`` for the rules and defaults.
"""

from __future__ import annotations

from j2c_server.pack.manifest import make_manifest
from j2c_server.pack.models import (
    ExcludedGroup,
    ExcludeRule,
    LayerPlan,
    PackedLayer,
    PackPlan,
    PackProgress,
    PackResult,
    PackSpec,
    PackWarning,
    PathSize,
)
from j2c_server.pack.packer import pack
from j2c_server.pack.plan import preflight
from j2c_server.pack.publish import PublishResult, publish

__all__ = [
    "ExcludeRule",
    "ExcludedGroup",
    "LayerPlan",
    "PackPlan",
    "PackProgress",
    "PackResult",
    "PackSpec",
    "PackWarning",
    "PackedLayer",
    "PathSize",
    "PublishResult",
    "make_manifest",
    "pack",
    "preflight",
    "publish",
]
