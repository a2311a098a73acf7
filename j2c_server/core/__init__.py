"""Standard-library-only helpers every part may import, ``j2c-unpack`` included: errors, backoff,
units, file modes, process output, the job's environment and the manifest's pydantic-free plan."""
