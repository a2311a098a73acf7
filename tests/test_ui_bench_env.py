"""The UI benchmark's switch (``J2C_BENCH``) reaches the Jupyter server's environment; it must
not be read as a settings key (the server extension would refuse to load)."""

from j2c_server.config import env_overrides


def test_bench_switch_is_not_a_settings_key() -> None:
    assert env_overrides({"J2C_BENCH": "1"}) == {}
