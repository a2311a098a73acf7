"""The job registry on one SQLite file: records and stage facts (``job_registry``), group commit
(``batch``), list paging and the event archive that keeps the live log across restarts."""
