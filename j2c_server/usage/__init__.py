"""Usage records: one small JSON document per job in the shared store (``usage/YYYY/MM/DD/``),
written when the job is submitted and again when it ends, and read back by ``j2c usage``.

``records.py`` owns the versioned models and how a :class:`~j2c_server.wire.api.JobRecord` becomes
one; ``writer.py`` writes them (retried, never failing a job) and is where the pipeline's hooks
land; ``report.py`` reads them back and aggregates them.
"""
