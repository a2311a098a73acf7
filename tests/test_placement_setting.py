"""``scheduler.placement``: the server's choice of where j2c-unpack puts code and venv
(``original`` / ``relocate``), passed as ``J2C_UNPACK_PATHS``; a job's own env or ``--paths``
wins over it."""

from __future__ import annotations

import pytest

from j2c_server.config import load_settings
from j2c_server.core.errors import ConfigError
from j2c_server.jobs.send.inputs import placement_env
from j2c_server.unpack.command_line import parse_command_line


def test_the_setting_reaches_the_job_only_when_it_is_not_the_default() -> None:
    assert placement_env(load_settings(environ={}, overrides={})) == {}
    relocate = load_settings(environ={}, overrides={"scheduler": {"placement": "relocate"}})
    assert placement_env(relocate) == {"J2C_UNPACK_PATHS": "relocate"}
    with pytest.raises(ConfigError, match=r"scheduler\.placement: Input should be 'original'"):
        load_settings(environ={}, overrides={"scheduler": {"placement": "elsewhere"}})


def test_j2c_unpack_reads_it_and_the_option_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("J2C_UNPACK_PATHS", raising=False)
    assert parse_command_line(["m.json"])[0].paths == "original"
    monkeypatch.setenv("J2C_UNPACK_PATHS", "relocate")
    assert parse_command_line(["m.json"])[0].paths == "relocate"
    assert parse_command_line(["m.json", "--paths", "original"])[0].paths == "original"


def test_a_bad_value_is_a_usage_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("J2C_UNPACK_PATHS", "nowhere")
    with pytest.raises(SystemExit) as raised:
        parse_command_line(["m.json"])
    assert raised.value.code == 2
    assert "J2C_UNPACK_PATHS='nowhere'" in capsys.readouterr().err
