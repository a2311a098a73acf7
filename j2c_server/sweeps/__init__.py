"""Sweeps: one send, N variants. A parent job packs and uploads once; each variant is a child job
pinned to its manifest. Above the jobs layer: ``hook.py`` plugs sweeps into its one hook for jobs
with children (``jobs/children.py``)."""
