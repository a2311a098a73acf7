"""Relocating a venv: which embedded paths are rewritten, and the proof that it runs."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from j2c_server.unpack.errors import VenvBroken
from j2c_server.unpack.interpreter import this_interpreter
from j2c_server.unpack.relocate import PathMap, fix_venv, verify_venv
from tests.support.projects import make_venv, write

OLD = "/home/jovyan/lab project"


def test_path_map_rewrites_a_path_and_what_lies_below_it():
    rewrite = PathMap({f"{OLD}/.venv": "/work/venv"})
    assert rewrite(f"#!{OLD}/.venv/bin/python\n".encode()) == b"#!/work/venv/bin/python\n"


def test_path_map_leaves_a_longer_name_alone():
    rewrite = PathMap({f"{OLD}/.venv": "/work/venv"})
    assert rewrite(f"{OLD}/.venv2/bin".encode()) == f"{OLD}/.venv2/bin".encode()


def test_path_map_prefers_the_venv_inside_the_project_over_the_project():
    rewrite = PathMap({OLD: "/work/code", f"{OLD}/.venv": "/work/venv"})
    assert rewrite(f"{OLD}/.venv {OLD}/src".encode()) == b"/work/venv /work/code/src"


def test_path_map_rewrites_file_urls_with_percent_encoding():
    rewrite = PathMap({OLD: "/work/my code"})
    data = b'{"url": "file:///home/jovyan/lab%20project", "dir_info": {"editable": true}}'
    assert b'"file:///work/my%20code"' in rewrite(data)


@pytest.fixture
def moved_venv(tmp_path: Path) -> Path:
    """A venv's relocatable files as the lab left them, now under ``tmp_path/new``."""
    venv = tmp_path / "new" / "venv"
    write(
        venv / "pyvenv.cfg",
        "home = /opt/lab-python/bin\ninclude-system-site-packages = true\nversion = 3.11.7\n"
        f"executable = /opt/lab-python/bin/python3.11\ncommand = /opt/lab-python/bin/python3.11 "
        f"-m venv --system-site-packages {OLD}/.venv\n",
    )
    write(venv / "bin" / "tool", f"#!{OLD}/.venv/bin/python\nimport tool\n")
    write(
        venv / "bin" / "long-tool",
        f"#!/bin/sh\n'''exec' \"{OLD}/.venv/bin/python\" \"$0\" \"$@\"\n' '''\nimport tool\n",
    )
    write(venv / "bin" / "activate", f'VIRTUAL_ENV="{OLD}/.venv"\nexport VIRTUAL_ENV\n')
    (venv / "bin" / "compiled").write_bytes(b"\x7fELF\0" + f"{OLD}/.venv".encode())
    (venv / "bin" / "python3.11").symlink_to("/opt/lab-python/bin/python3.11")
    (venv / "bin" / "python").symlink_to("python3.11")
    site = venv / "lib" / "python3.11" / "site-packages"
    write(site / "__editable__.mylib-0.1.pth", f"{OLD}/src\n")
    write(site / "__editable___flat_0_1_finder.py", f"MAPPING = {{'flat': '{OLD}/flat'}}\n")
    write(site / "mylib-0.1.dist-info" / "direct_url.json", f'{{"url": "file://{OLD}"}}')
    (venv / "bin" / "tool").chmod(0o755)
    return venv


def fix(venv: Path) -> int:
    moves = {OLD: str(venv.parent / "code"), f"{OLD}/.venv": str(venv)}
    return fix_venv(venv, this_interpreter(), moves)


def test_console_script_shebangs_name_the_new_venv(moved_venv: Path):
    fix(moved_venv)
    assert (moved_venv / "bin" / "tool").read_text().startswith(f"#!{moved_venv}/bin/python\n")
    assert f"'''exec' \"{moved_venv}/bin/python\"" in (moved_venv / "bin" / "long-tool").read_text()


def test_rewritten_scripts_keep_their_mode(moved_venv: Path):
    fix(moved_venv)
    assert stat.S_IMODE((moved_venv / "bin" / "tool").stat().st_mode) == 0o755


def test_activate_names_the_new_venv(moved_venv: Path):
    fix(moved_venv)
    assert f'VIRTUAL_ENV="{moved_venv}"' in (moved_venv / "bin" / "activate").read_text()


def test_programs_in_bin_are_left_alone(moved_venv: Path):
    before = (moved_venv / "bin" / "compiled").read_bytes()
    fix(moved_venv)
    assert (moved_venv / "bin" / "compiled").read_bytes() == before


def test_editable_installs_point_into_the_new_code_folder(moved_venv: Path):
    fix(moved_venv)
    site = moved_venv / "lib" / "python3.11" / "site-packages"
    code = moved_venv.parent / "code"
    assert (site / "__editable__.mylib-0.1.pth").read_text() == f"{code}/src\n"
    assert f"'{code}/flat'" in (site / "__editable___flat_0_1_finder.py").read_text()
    assert f"file://{code}" in (site / "mylib-0.1.dist-info" / "direct_url.json").read_text()


def test_pyvenv_cfg_names_this_interpreter(moved_venv: Path):
    fix(moved_venv)
    interpreter = this_interpreter()
    config = (moved_venv / "pyvenv.cfg").read_text()
    assert f"home = {interpreter.home}\n" in config
    assert f"executable = {interpreter.executable}\n" in config
    assert f"command = {interpreter.executable} -m venv --system-site-packages {moved_venv}\n" in (
        config
    )
    assert "include-system-site-packages = true\n" in config


def test_interpreter_links_point_at_this_interpreter(moved_venv: Path):
    fix(moved_venv)
    assert os.readlink(moved_venv / "bin" / "python3.11") == str(this_interpreter().executable)
    assert os.readlink(moved_venv / "bin" / "python") == "python3.11"


def test_a_venv_that_runs_as_this_venv_passes_the_check(tmp_path: Path):
    verify_venv(make_venv(tmp_path / "venv", packages={}))


def test_a_venv_that_silently_runs_the_base_interpreter_fails_the_check(tmp_path: Path):
    venv = make_venv(tmp_path / "venv", packages={})
    (venv / "pyvenv.cfg").unlink()
    with pytest.raises(VenvBroken, match=r"runs as the base interpreter \(sys.prefix is "):
        verify_venv(venv)


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests do not run from a venv")
def test_this_interpreter_is_the_base_python_even_when_j2c_unpack_runs_from_a_venv():
    interpreter = this_interpreter()
    assert not interpreter.executable.is_relative_to(sys.prefix)
    assert interpreter.executable.is_relative_to(sys.base_prefix)
