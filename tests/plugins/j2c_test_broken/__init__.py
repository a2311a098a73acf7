"""A scheduler plug-in whose import fails, as one does when a client it needs is missing."""

from __future__ import annotations

from j2c_test_quantum_client import QuantumClient  # type: ignore[import-not-found]  # never installed

from j2c_server.schedulers.base import SchedulerBase


class BrokenScheduler(SchedulerBase):
    name = "broken"
    client = QuantumClient
