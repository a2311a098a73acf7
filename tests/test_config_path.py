"""Where ``j2c.yaml`` is read from: every one along Jupyter's config path, merged key by key in
Jupyter's order (the first folder of ``jupyter --paths`` wins), so an image's file sets what an
operator sets for everyone; ``$J2C_CONFIG`` names the one file instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.config import default_config_files, load_settings


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An image's config folder (on ``JUPYTER_CONFIG_PATH``) and the user's own."""
    image, user = tmp_path / "etc-jupyter", tmp_path / "home-jupyter"
    image.mkdir()
    user.mkdir()
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(image))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(user))
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    return image, user


def test_the_image_file_applies_when_the_user_has_none(folders: tuple[Path, Path]) -> None:
    image, _ = folders
    (image / "j2c.yaml").write_text("storage:\n  url: s3://team-bucket/j2c\n")
    settings = load_settings(environ={})
    assert settings.storage.url == "s3://team-bucket/j2c"
    assert default_config_files() == [image / "j2c.yaml"]


def test_both_files_merge_key_by_key(folders: tuple[Path, Path], tmp_path: Path) -> None:
    image, user = folders
    (image / "j2c.yaml").write_text("storage:\n  url: s3://team-bucket/j2c\ndefault_image: img:1\n")
    (user / "j2c.yaml").write_text(f"data_dir: {tmp_path / 'mine'}\ndefault_image: img:2\n")
    settings = load_settings(environ={})
    assert settings.storage.url == "s3://team-bucket/j2c"  # only in the image's
    assert settings.data_dir == str(tmp_path / "mine")  # only in the user's
    # JUPYTER_CONFIG_PATH comes before the user's folder in Jupyter's order: the image wins.
    assert settings.default_image == "img:1"
    assert default_config_files() == [user / "j2c.yaml", image / "j2c.yaml"]


def test_j2c_config_names_the_one_file(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _ = folders
    (image / "j2c.yaml").write_text("storage:\n  url: s3://team-bucket/j2c\n")
    own = tmp_path / "own.yaml"
    own.write_text("default_image: img:3\n")
    monkeypatch.setenv("J2C_CONFIG", str(own))
    settings = load_settings(environ={})
    assert settings.storage.url is None
    assert settings.default_image == "img:3"
