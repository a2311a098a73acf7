"""A presigned job's way to upload its outputs (``storage.presign_for_jobs``): a POST policy
limited to its own ``jobs/<id>/outputs/`` prefix, signed by the server, given to the job in
``$J2C_OUTPUTS_POST_CREDENTIAL`` (storage/post_upload.py uploads through it).

- **Prefix**: the job's outputs prefix and nothing else (a ``starts-with`` condition on ``$key``):
  the job can neither read nor overwrite another job's files or the layers.
- **Size**: ``content-length-range`` up to ``outputs.max_file_mb`` (files over it are left out
  anyway), at least :data:`INDEX_ROOM` so a large outputs index still fits, at most S3's 5 GiB
  for one POST.
- **Expiry**: the job's time limit plus a margin: ``storage.presign_expiry_s`` (the job cannot
  start later than that: its layers' URLs die then) and :data:`FINAL_SYNC_S` for the last sync.
  Without a time limit, and never longer than, 7 days (SigV4's limit for presigned requests).
"""

from __future__ import annotations

from j2c_server.config import J2CSettings
from j2c_server.jobs.results import outputs_prefix
from j2c_server.storage.base import ObjectStore
from j2c_server.wire.api import JobRecord

MB = 1_000_000
INDEX_ROOM = 64 * MB
POST_MAX_BYTES = 5 * 1024**3  # S3 takes one POST object up to 5 GiB
FINAL_SYNC_S = 600
MAX_LIFETIME_S = 7 * 24 * 3600


def policy_lifetime_s(settings: J2CSettings, record: JobRecord) -> int:
    """How long the job's upload policy lives, in seconds."""
    limit = record.request.resources.time_limit_minutes
    if limit is None:
        return MAX_LIFETIME_S
    return min(MAX_LIFETIME_S, settings.storage.presign_expiry_s + limit * 60 + FINAL_SYNC_S)


def policy_max_bytes(settings: J2CSettings) -> int:
    """The largest object the job's upload policy takes."""
    per_file = int(settings.outputs.max_file_mb * MB)
    return min(POST_MAX_BYTES, max(per_file, INDEX_ROOM))


async def outputs_policy(
    settings: J2CSettings, store: ObjectStore, record: JobRecord
) -> str | None:
    """The job's upload policy as ``$J2C_OUTPUTS_POST_CREDENTIAL`` holds it, or None when the
    store cannot sign one (the results then say that outputs need store access)."""
    policy = await store.presign_post(
        outputs_prefix(record.id) + "/",
        max_bytes=policy_max_bytes(settings),
        expires_s=policy_lifetime_s(settings, record),
    )
    return None if policy is None else policy.to_json()


def told_to_upload(record: JobRecord) -> bool:
    """Whether the job's configured command names where its outputs go (``--output-uri``):
    always with the store's credentials, with presigned URLs only when a policy was signed."""
    stage = record.stages.get("configure")
    spec = stage.output.get("spec") if stage is not None else None
    command = spec.get("command") if isinstance(spec, dict) else None
    return isinstance(command, list) and "--output-uri" in command
