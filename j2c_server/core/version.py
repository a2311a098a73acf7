"""This j2c's version, one place for every part that writes it down (manifests, usage records,
the plan cache's validator id, the inventory line, the server): the built package's, else
``0.0.0+unknown`` in a source checkout that was never built. Standard library only."""

from __future__ import annotations

try:
    from j2c_server._version import __version__
except ImportError:  # a source checkout that was never built
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
