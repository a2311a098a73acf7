"""Settings of the ``ray`` scheduler (``scheduler.ray.*``): light, so that loading the
configuration never imports the backend. docs/ray.md says what each one means on a cluster."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="The Ray dashboard's URL (the Jobs REST API), e.g. http://head:8265."
    )
    token_file: str | None = Field(
        None,
        description="A file holding the bearer token sent as 'Authorization: Bearer' (re-read "
        "when it changes); else $RAY_AUTH_TOKEN. Never a setting's value: tokens stay out of "
        "configuration files and documents.",
    )
    verify_tls: bool = Field(True, description="Verify the dashboard's TLS certificate.")
    ca_file: str | None = Field(None, description="A CA bundle for the dashboard's certificate.")
    image: str | None = Field(
        None,
        description="The cluster's own image. With image_mode 'cluster', a job asking for "
        "another image is refused.",
    )
    image_mode: Literal["cluster", "image_uri"] = Field(
        "cluster",
        description="'cluster': the entrypoint runs in the node's own image; 'image_uri': a "
        "job's image becomes runtime_env.image_uri (nodes with podman, Ray >= 2.36).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment every job starts with (runtime_env.env_vars), e.g. a PATH "
        "that finds j2c-unpack on the nodes.",
    )
    cache_dir: str | None = Field(
        None,
        description="A node-local folder for j2c-unpack's layer cache on the node that runs "
        "the entrypoint; each user's cache is a folder in it (J2C_UNPACK_CACHE).",
    )
    cache_max: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)?\s*[KMGT]?i?B?$",
        description="Size cap of each user's cache (J2C_UNPACK_CACHE_MAX; default 20G).",
    )
    secrets_dir: str | None = Field(
        None,
        description="A folder this server writes and the nodes that run entrypoints read at "
        "the same path (a shared filesystem): a job's credentials (pass_env values, a presigned "
        "manifest, the outputs upload policy) wait there in a 0600 file of the user's own "
        "folder, never in the job's runtime_env or entrypoint, which every dashboard client "
        "reads. Without it a job that carries one is refused.",
    )
    gpu_type_resource: str = Field(
        "accelerator_type:{gpu_type}",
        description="The Ray resource a GPU type asks for ({gpu_type} is replaced); Ray gives "
        "each node with detected GPUs 'accelerator_type:<model>'.",
    )
    poll_interval_s: float = Field(
        0.5, gt=0, le=30, description="Status poll period (logs stream through the tail websocket)."
    )
