"""A backend's ``shm_size`` setting that its units cannot express is a ConfigError naming the
key, with an example of what the backend takes (pure renders: no engine or cluster needed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.spec import render_create
from j2c_server.schedulers.kubernetes.spec import render_job

SPEC = JobSpec(key="k", job_id="j", name="n", image="img:1", command=["j2c-unpack", "m.json"])


@pytest.mark.parametrize(
    ("backend", "render", "example"),
    [("container", render_create, "'8G'"), ("kubernetes", render_job, "'8Gi'")],
)
def test_an_shm_size_that_is_not_a_size_is_refused_naming_the_key(
    backend: str, render: Callable[..., Any], example: str
) -> None:
    settings = J2CSettings.model_validate({"scheduler": {backend: {"shm_size": "lots"}}})
    with pytest.raises(ConfigError) as refused:
        render(SPEC, settings)
    assert refused.value.field == f"scheduler.{backend}.shm_size"
    assert str(refused.value) == (
        f"scheduler.{backend}.shm_size: 'lots' is not a size (e.g. {example})"
    )
