"""Attribution of audit lines and usage records is not taken from ``$USER``/``$LOGNAME``."""

from __future__ import annotations

import os
import pwd

import pytest

from j2c_server.jobs.audit import local_actor, local_user


def test_user_and_logname_do_not_change_attribution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "alice")
    real = pwd.getpwuid(os.getuid()).pw_name
    assert real != "alice"
    assert local_user() == real
    assert local_actor("cli").user == real


def test_the_hub_user_of_this_server_is_the_actor() -> None:
    env = {"JUPYTERHUB_USER": "bob", "USER": "alice"}
    assert local_user(env) == "bob"
