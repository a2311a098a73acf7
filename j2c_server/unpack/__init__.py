"""``j2c-unpack``: runs inside the job's container, turns a manifest into a running entry point.

Import-light by design (a job's start-up waits for it): nothing here imports jupyter_server,
tornado, aiobotocore or httpx on the default path; the storage package is loaded only for
``s3://`` URIs and ``--output-uri``. ``__main__`` reads top to bottom as the runbook; each phase
lives in its own module: fetch, extract, homes, relocate, interpreter, run, notebook, outputs.
"""
