"""Settings of the ``kubernetes`` scheduler (``scheduler.kubernetes.*``): light, so that loading
the configuration never imports the backend."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class KubernetesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    service_account: str | None = None
    env_from_secret: str | None = Field(None, description="Secret with storage credentials.")
    run_as_user: int = Field(
        1000,
        ge=1,
        description="The uid of every job's pod (runAsNonRoot; 0 is refused: the Pod Security "
        "Standards' restricted profile forbids it). Default: the Jupyter images' jovyan.",
    )
    run_as_group: int = Field(100, ge=0, description="The gid of every job's pod.")
    fs_group: int | None = Field(
        100, ge=0, description="fsGroup of the pod's volumes (null: none set)."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None,
        description="imagePullPolicy of the job's container (default: Kubernetes' own). "
        "'Always' for private images on shared nodes: the registry checks each pull's "
        "credentials, so a node's cached copy does not reach a user without access.",
    )
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
    cache_volume: dict[str, Any] | None = Field(
        None,
        description="Volume source of j2c-unpack's layer cache on the node (one key, as in a "
        "pod's volumes: ephemeral, csi, persistentVolumeClaim, emptyDir...), mounted at "
        "/j2c/cache; a pod mounts only its user's folder in it (subPath <user>), which must "
        "belong to the pods' uid. hostPath only with "
        "cache_allow_host_path (it fails the Pod Security Standards' baseline).",
    )
    cache_allow_host_path: bool = Field(
        False, description="Allow a hostPath cache_volume (the operator's explicit choice)."
    )
    cache_max: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)?\s*[KMGT]?i?B?$",
        description="Size cap of each user's cache (J2C_UNPACK_CACHE_MAX; default 20G).",
    )

    @field_validator("cache_volume")
    @classmethod
    def _one_volume_source(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and (
            len(value) != 1 or not isinstance(next(iter(value.values())), dict)
        ):
            raise ValueError(
                "one volume source, as in a pod's volumes without its name, e.g. "
                "{ephemeral: {volumeClaimTemplate: {...}}} or {csi: {driver: ...}}"
            )
        return value
