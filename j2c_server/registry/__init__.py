"""The job registry on one SQLite file: ``Registry`` (``job_registry``) over the file and schema
(``db``), its jobs, events and leases tables, group commit (``batch``), list paging and the event
archive that keeps the live log across restarts."""
