"""What each layer leaves out, and that every exclusion is reported with its rule."""

from __future__ import annotations

import os
from pathlib import Path

from j2c_server.pack import ExcludeRule, PackPlan, PackSpec, pack, preflight
from j2c_server.wire.manifest import LayerRole
from tests.pack.archives import names
from tests.support.projects import make_venv, site_packages, write


def excluded(plan: PackPlan, rule: ExcludeRule, layer: LayerRole = LayerRole.code) -> list[str]:
    return next(
        (g.paths for g in plan.excluded if g.rule == rule and g.layer == layer),
        [],
    )


def code_names(spec: PackSpec, cache: Path) -> list[str]:
    result = pack(spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None
    return names(code.path)


def test_code_layer_leaves_out_git_pycache_and_checkpoints(spec: PackSpec, cache: Path) -> None:
    shipped = code_names(spec, cache)
    assert not [n for n in shipped if n.split("/")[0] in (".git", ".ipynb_checkpoints")]
    assert not [n for n in shipped if "__pycache__" in n]
    assert {".git/", ".ipynb_checkpoints/", "mypkg/__pycache__/"} <= set(
        excluded(preflight(spec), ExcludeRule.default)
    )


def test_code_layer_leaves_out_editor_and_os_junk(spec: PackSpec, project: Path) -> None:
    for name in (".DS_Store", "train.py.swp", "train.py~", "data/Thumbs.db"):
        write(project / name, "junk")
    assert set(excluded(preflight(spec), ExcludeRule.default)) >= {
        ".DS_Store",
        "train.py.swp",
        "train.py~",
        "data/Thumbs.db",
    }


def test_gitignore_patterns_are_honoured(spec: PackSpec, cache: Path) -> None:
    shipped = code_names(spec, cache)
    assert "run.log" not in shipped and not [n for n in shipped if n.startswith("outputs")]
    assert excluded(preflight(spec), ExcludeRule.gitignore) == ["outputs/", "run.log"]


def test_nested_gitignore_applies_below_its_folder(spec: PackSpec, project: Path) -> None:
    write(project / "data" / ".gitignore", "*.csv\n")
    write(project / "top.csv", "kept: the nested rule does not reach up\n")
    plan = preflight(spec)
    assert excluded(plan, ExcludeRule.gitignore) == ["data/train.csv", "outputs/", "run.log"]


def test_j2cignore_wins_over_gitignore(spec: PackSpec, project: Path, cache: Path) -> None:
    write(project / ".j2cignore", "!run.log\ndata/\n")
    shipped = code_names(spec, cache)
    assert "run.log" in shipped
    assert "data/train.csv" not in shipped
    assert excluded(preflight(spec), ExcludeRule.j2cignore) == ["data/"]


def test_user_excludes_win_over_ignore_files(project: Path, venv: Path) -> None:
    write(project / ".j2cignore", "!run.log\n")
    spec = PackSpec(
        code_path=project, call_path="train.py", venv_path=venv, excludes=["*.log", "*.csv"]
    )
    plan = preflight(spec)
    assert excluded(plan, ExcludeRule.exclude) == ["data/train.csv", "run.log"]


def test_secrets_are_excluded_and_reported_by_name(spec: PackSpec, cache: Path) -> None:
    result = pack(spec, cache)
    secrets = excluded(preflight(spec), ExcludeRule.secret)
    assert secrets == [".aws/", ".env", ".env.local", "certs/server.pem", "keys/id_rsa"]
    code = result.layer(LayerRole.code)
    assert code is not None
    shipped = names(code.path)
    assert not {".env", ".env.local", "keys/id_rsa", "certs/server.pem"} & set(shipped)
    assert not [n for n in shipped if n.startswith(".aws")]
    warning = next(w for w in result.warnings if w.code == "secret")
    assert ".env" in warning.message and "keys/id_rsa" in warning.message


def test_includes_opt_a_secret_back_in(project: Path, venv: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv, includes=[".env"])
    assert ".env" in code_names(spec, cache)
    assert ".env" not in excluded(preflight(spec), ExcludeRule.secret)


def test_include_inside_an_excluded_folder_ships_only_that_file(
    project: Path, venv: Path, cache: Path
) -> None:
    write(project / ".aws" / "config", "[default]\nregion = eu-west-1\n")
    spec = PackSpec(
        code_path=project, call_path="train.py", venv_path=venv, includes=[".aws/config"]
    )
    shipped = code_names(spec, cache)
    assert ".aws/config" in shipped
    assert ".aws/credentials" not in shipped


def test_venv_layer_keeps_bytecode_and_certificates(tmp_path: Path, project: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    write(site_packages(venv) / "certifi" / "cacert.pem", "-----BEGIN CERTIFICATE-----\n")
    result = pack(PackSpec(code_path=project, call_path="train.py", venv_path=venv), tmp_path / "c")
    layer = result.layer(LayerRole.venv)
    assert layer is not None
    shipped = names(layer.path)
    assert [n for n in shipped if "/__pycache__/" in n and n.endswith(".pyc")]
    assert [n for n in shipped if n.endswith("certifi/cacert.pem")]


def test_nested_venv_is_written_once(project: Path, cache: Path) -> None:
    venv = make_venv(project / ".venv")
    result = pack(PackSpec(code_path=project, call_path="train.py", venv_path=venv), cache)
    code, venv_layer = result.layer(LayerRole.code), result.layer(LayerRole.venv)
    assert code is not None and venv_layer is not None
    assert not [n for n in names(code.path) if n.startswith(".venv")]
    assert "pyvenv.cfg" in names(venv_layer.path)
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert excluded(plan, ExcludeRule.venv) == [".venv/"]


def test_another_venv_inside_the_project_is_left_out(
    tmp_path: Path, project: Path, venv: Path
) -> None:
    make_venv(project / "old-env", packages={})
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert excluded(plan, ExcludeRule.nested_venv) == ["old-env/"]


def test_folder_tagged_as_cache_is_left_out(spec: PackSpec, project: Path) -> None:
    write(project / "scratch" / "CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")
    write(project / "scratch" / "big.bin", "x" * 1000)
    assert excluded(preflight(spec), ExcludeRule.cache_dir) == ["scratch/"]


def test_symlink_inside_the_project_is_kept_as_a_link(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    os.symlink("train.py", project / "main.py")
    result = pack(spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None
    from tests.pack.archives import members

    member = members(code.path)["main.py"]
    assert member.issym() and member.linkname == "train.py"


def test_symlink_escaping_the_project_is_not_followed_and_is_reported(
    spec: PackSpec, project: Path, tmp_path: Path, cache: Path
) -> None:
    outside = write(tmp_path / "elsewhere" / "big.dat", "outside data")
    os.symlink(outside, project / "absolute-link")
    os.symlink("../../elsewhere", project / "data" / "relative-link")
    os.symlink("../../elsewhere/big.dat", project / "data" / "climbing-link")
    result = pack(spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None
    shipped = names(code.path)
    assert not {"absolute-link", "data/relative-link", "data/climbing-link"} & set(shipped)
    reported = excluded(preflight(spec), ExcludeRule.symlink_escape)
    assert [r.split(" -> ")[0] for r in reported] == [
        "absolute-link",
        "data/climbing-link",
        "data/relative-link",
    ]
    assert any(w.code == "symlink_escape" for w in result.warnings)


def test_fifo_is_skipped_and_reported(spec: PackSpec, project: Path, cache: Path) -> None:
    os.mkfifo(project / "data" / "pipe")
    result = pack(spec, cache)  # would block forever if the FIFO were opened
    code = result.layer(LayerRole.code)
    assert code is not None
    assert "data/pipe" not in names(code.path)
    assert excluded(preflight(spec), ExcludeRule.special_file) == ["data/pipe"]
    assert any(w.code == "special_file" for w in result.warnings)


def test_name_that_is_not_utf8_is_skipped_and_reported(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    with open(os.path.join(os.fsencode(project), b"caf\xe9.txt"), "wb") as latin1:
        latin1.write(b"written by an old tool")
    result = pack(spec, cache)
    assert excluded(preflight(spec), ExcludeRule.bad_name) == ["caf?.txt"]
    assert any(w.code == "bad_name" for w in result.warnings)


def test_invalid_line_in_an_ignore_file_is_skipped_like_git_does(
    spec: PackSpec, project: Path
) -> None:
    write(project / ".gitignore", "outputs/\n!\n*.log\n")
    assert excluded(preflight(spec), ExcludeRule.gitignore) == ["outputs/", "run.log"]
