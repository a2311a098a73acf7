"""The choice of what ships from the lab's base: the settings, the request fields, and the flags
``j2c submit`` and ``%j2c`` share (``cli/options.submit_options``)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from j2c_server.cli.options import build_request, flags_layer, script_args
from j2c_server.cli.submit import submit
from j2c_server.config import load_settings
from j2c_server.core.errors import ConfigError
from j2c_server.image.base_layer import ShipChoice
from j2c_server.jobs.send.inputs import ship_choice
from j2c_server.wire.api import JobRequest


def _request(tmp_path: Path, *argv: str) -> JobRequest:
    (tmp_path / "train.py").write_text("print(1)\n")
    ctx = submit.make_context("j2c submit", ["train.py", "--code-path", str(tmp_path), *argv])
    return build_request(flags_layer(ctx.params, script_args(ctx), tmp_path))


def test_the_flags_set_the_request_and_the_request_beats_the_settings(tmp_path: Path) -> None:
    plain = _request(tmp_path)
    assert (plain.ship_base, plain.base_conflicts, plain.force_base) == (None, None, False)
    flagged = _request(tmp_path, "--no-ship-base", "--base-conflicts", "image", "--force-base")
    assert (flagged.ship_base, flagged.base_conflicts, flagged.force_base) == (False, "image", True)

    defaults = load_settings(environ={}, overrides={})
    assert ship_choice(defaults, plain) == ShipChoice(True, None, "auto", False)
    assert ship_choice(defaults, flagged) == ShipChoice(False, "--no-ship-base", "image", True)
    off = load_settings(
        environ={}, overrides={"pack": {"ship_base_packages": False, "base_conflicts": "ship"}}
    )
    assert ship_choice(off, plain) == ShipChoice(False, "pack.ship_base_packages is off", "ship")
    on = plain.model_copy(update={"ship_base": True})
    assert ship_choice(off, on).enabled  # the job's word beats the setting


def test_a_bad_choice_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(click.BadParameter) as bad:
        _request(tmp_path, "--base-conflicts", "maybe")
    assert "'maybe' is not one of 'auto', 'ship', 'image'" in str(bad.value)
    with pytest.raises(ConfigError) as wrong:
        load_settings(environ={}, overrides={"pack": {"base_conflicts": "newest"}})
    assert wrong.value.field == "pack.base_conflicts"
