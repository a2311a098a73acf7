"""What the job's target runs on, and what the job needs from it, known before any upload.

- ``models.py``: the inventory of a target's Python (as ``unpack/inventory.py`` writes it) and
  the report of the differences (part of the preflight plan);
- ``target.py``: which inventory a job's target has (its key);
- ``store.py``: inventories kept in the data dir, by key;
- ``probe.py``: a ``scheduler: container`` image inventoried once through the engine;
- ``needs.py``: what a job needs from its base Python (venv closure, project imports);
- ``diff.py``: the needs against an inventory; ``text.py``: the report's words;
- ``check.py``: the whole check as the service runs it at preflight and before upload.

Kept light: importing this package imports none of its modules.
"""
