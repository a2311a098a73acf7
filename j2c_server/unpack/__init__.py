"""The compute side: ``j2c-unpack``, which runs inside the job's container and turns a manifest
into a running entry point. It and what it imports (``core/``, ``wire/``, ``storage/``, the
``unpack`` extra's distributions: ``[tool.j2c]`` in pyproject.toml) are all of j2c a job's
image holds; nothing here imports the lab side.

Import-light by design (a job's start-up waits for it): nothing here imports jupyter_server,
tornado, aiobotocore or httpx on the default path; the storage package is loaded only for
``s3://`` URIs and ``--output-uri``. ``__main__`` reads top to bottom as the runbook; each phase
lives in its own module: fetch, extract, homes, relocate, interpreter, run, notebook, outputs.
"""
