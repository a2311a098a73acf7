"""Settings of the ``kubernetes`` scheduler (``scheduler.kubernetes.*``): light, so that loading
the configuration never imports the backend."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class KubernetesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    service_account: str | None = None
    env_from_secret: str | None = Field(None, description="Secret with storage credentials.")
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type_label: str = "nvidia.com/gpu.product"
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    ttl_seconds_after_finished: int | None = 3600
    active_deadline_seconds: int | None = None
    shm_size: str | None = "8Gi"
    poll_interval_s: float = Field(
        2.0, gt=0, description="How often to re-read a Job's pod while waiting for it to start."
    )
