"""Job parameters: defaults < config file < J2C_JOB__* environment < flags, one option parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from j2c_server.cli.options import (
    build_request,
    cli_defaults,
    default_venv_note,
    find_project_root,
    flags_layer,
    load_cli_config,
    script_args,
)
from j2c_server.cli.submit import submit
from j2c_server.core.errors import ConfigError, InvalidInput
from j2c_server.wire.api import JobRequest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "train.py").write_text("print('hi')\n")
    return root


def parse(*argv: str) -> tuple[dict[str, Any], list[str]]:
    ctx = submit.make_context("j2c submit", list(argv))
    return ctx.params, script_args(ctx)


def request_for(
    project: Path, *argv: str, config: str | None = None, environ: dict[str, str] | None = None
) -> JobRequest:
    path = None
    if config is not None:
        path = project / "j2c.yaml"
        path.write_text(config)
    loaded = load_cli_config(path, environ=environ or {})
    params, args = parse(*argv)
    return build_request(cli_defaults(project, {}), loaded.job, flags_layer(params, args, project))


def test_flag_beats_environment_beats_file(project: Path) -> None:
    config = "job:\n  call_path: train.py\n  gpus: 1\n"
    env = {"J2C_JOB__GPUS": "2"}
    assert request_for(project, config=config).resources.gpus == 1
    assert request_for(project, config=config, environ=env).resources.gpus == 2
    assert request_for(project, "--gpus", "3", config=config, environ=env).resources.gpus == 3


def test_resources_may_be_nested_or_flat_in_the_file(project: Path) -> None:
    nested = request_for(project, config="job:\n  call_path: train.py\n  resources: {gpus: 2}\n")
    flat = request_for(project, config="job:\n  call_path: train.py\n  gpus: 2\n")
    assert nested.resources == flat.resources


def test_relative_paths_in_the_file_are_relative_to_the_file(project: Path, tmp_path: Path) -> None:
    config = tmp_path / "elsewhere" / "j2c.yaml"
    config.parent.mkdir()
    config.write_text("job:\n  code_path: ../proj\n  call_path: train.py\n")
    job = load_cli_config(config, environ={}).job
    assert job["code_path"] == str(project.resolve())
    # The entry point, like the seed's --call-path, is taken inside the project.
    assert build_request(job).call_path == str((project / "train.py").resolve())


def test_entry_flag_is_made_absolute_against_the_current_folder(project: Path) -> None:
    request = request_for(project, "src/run.py")
    assert request.call_path == str(project / "src" / "run.py")


def test_module_entry_point_passes_through(project: Path) -> None:
    assert request_for(project, "--call-path", "-m pkg.train").call_path == "-m pkg.train"


def test_dash_m_runs_a_module_as_python_does(project: Path) -> None:
    request = request_for(project, "-m", "pytest", "--", "tests", "-q")
    assert (request.call_path, request.args) == ("-m pytest", ["tests", "-q"])


@pytest.mark.parametrize(
    "argv", [("train.py", "-m", "pytest"), ("--call-path", "train.py", "--module", "pytest")]
)
def test_two_entry_points_are_refused_naming_both(project: Path, argv: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput, match=r"give the entry point once: .*-m pytest"):
        request_for(project, *argv)


def test_arguments_after_double_dash_go_to_the_script(project: Path) -> None:
    request = request_for(project, "train.py", "--gpus", "1", "--", "--gpus", "8", "-x")
    assert request.args == ["--gpus", "8", "-x"]
    assert request.resources.gpus == 1


def test_flag_args_replace_file_args(project: Path) -> None:
    config = "job:\n  call_path: train.py\n  args: [--epochs, 3]\n"
    assert request_for(project, config=config).args == ["--epochs", "3"]
    assert request_for(project, "--", "--lr", "1", config=config).args == ["--lr", "1"]


def test_env_merges_name_by_name(project: Path) -> None:
    config = "job:\n  call_path: train.py\n  env: {A: '1', B: '2'}\n"
    request = request_for(project, "--env", "B=3", "--env", "C=x=y", config=config)
    assert request.env == {"A": "1", "B": "3", "C": "x=y"}


def test_environment_lists_are_json(project: Path) -> None:
    env = {"J2C_JOB__CALL_PATH": "train.py", "J2C_JOB__ARGS": '["a", "b c"]'}
    loaded = load_cli_config(None, environ=env)
    assert loaded.job["args"] == ["a", "b c"]


def test_env_flag_without_equals_names_the_field(project: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project, "train.py", "--env", "NOVALUE")
    assert caught.value.field == "env"


def test_entry_given_twice_is_refused(project: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project, "train.py", "--call-path", "other.py")
    assert caught.value.field == "call_path"


def test_missing_entry_point_names_call_path(project: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project)
    assert caught.value.field == "call_path"


def test_bad_memory_names_the_field(project: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project, "train.py", "--memory", "lots")
    assert caught.value.field == "resources.memory"


def test_unknown_job_key_names_the_key(project: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        request_for(project, config="job:\n  call_pth: train.py\n")
    assert caught.value.field == "job.call_pth"


def test_no_venv_drops_the_active_venv(project: Path, tmp_path: Path) -> None:
    defaults = cli_defaults(project, {"VIRTUAL_ENV": str(tmp_path)})
    params, args = parse("train.py", "--no-venv")
    request = build_request(defaults, flags_layer(params, args, project))
    assert request.venv_path is None


def test_active_venv_is_shipped_by_default(project: Path, tmp_path: Path) -> None:
    assert cli_defaults(project, {"VIRTUAL_ENV": str(tmp_path)})["venv_path"] == str(tmp_path)


def test_without_an_active_venv_the_projects_own_venv_is_shipped(project: Path) -> None:
    (project / ".venv").mkdir()
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    defaults = cli_defaults(project / "src", {})
    assert defaults["venv_path"] == str(project.resolve() / ".venv")
    assert default_venv_note(defaults, {}) == "venv: the project's venv " + str(
        project.resolve() / ".venv"
    )


# ------------------------------------------------------------- the seed's --call-path form


def test_call_path_is_taken_inside_the_code_path_from_any_folder(
    project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    params, args = parse("--code-path", str(project), "--call-path", "train.py")
    request = build_request(cli_defaults(elsewhere, {}), flags_layer(params, args, elsewhere))
    assert request.code_path == str(project)
    assert request.call_path == str(project.resolve() / "train.py")


def test_call_path_typed_inside_the_project_is_the_file_seen_there(project: Path) -> None:
    (project / "src" / "run.py").write_text("")
    params, args = parse("run.py")
    request = build_request(
        cli_defaults(project / "src", {}), flags_layer(params, args, project / "src")
    )
    assert request.call_path == str(project.resolve() / "src" / "run.py")


def test_call_path_missing_where_typed_falls_back_to_the_project(project: Path) -> None:
    params, args = parse("train.py")
    request = build_request(
        cli_defaults(project / "src", {}), flags_layer(params, args, project / "src")
    )
    assert request.call_path == str(project.resolve() / "train.py")


def test_environment_call_path_follows_the_same_rule(project: Path, tmp_path: Path) -> None:
    env = {"J2C_JOB__CODE_PATH": str(project), "J2C_JOB__CALL_PATH": "train.py"}
    job = load_cli_config(None, environ=env).job
    assert build_request(job).call_path == str(project.resolve() / "train.py")


def test_project_root_is_the_nearest_marked_ancestor(project: Path) -> None:
    assert find_project_root(project / "src") == project.resolve()


def test_project_root_without_marker_is_the_folder_itself(tmp_path: Path) -> None:
    assert find_project_root(tmp_path) == tmp_path.resolve()


def test_a_folder_the_repository_ignores_is_a_project_of_its_own(tmp_path: Path) -> None:
    # make lab's copy of the example: repo/.lab/digits, with repo/.gitignore listing .lab/.
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.log\n.lab/\n")
    digits = repo / ".lab" / "digits"
    (digits / "data").mkdir(parents=True)
    assert find_project_root(digits) == digits.resolve()
    assert find_project_root(digits / "data") == digits.resolve()
    assert find_project_root(repo / ".lab") == (repo / ".lab").resolve()
    (repo / "src").mkdir()
    assert find_project_root(repo / "src") == repo.resolve()


def test_sweep_flags_make_a_grid_in_the_request(project: Path) -> None:
    request = request_for(
        project,
        "train.py",
        "--sweep", "lr=1e-3,3e-4",
        "--sweep", "seed=0,1,2",
        "--max-parallel", "2",
        "--retries", "1",
        "--", "--lr", "{lr}", "--seed", "{seed}",
    )  # fmt: skip
    assert request.sweep is not None
    assert request.sweep.grid == {"lr": ["1e-3", "3e-4"], "seed": ["0", "1", "2"]}
    assert request.sweep.max_parallel == 2
    assert request.sweep.retries == 1
    assert request.args == ["--lr", "{lr}", "--seed", "{seed}"]


def test_a_sweep_file_is_read_and_flags_add_to_its_grid(project: Path) -> None:
    (project / "sweep.yaml").write_text(
        "grid:\n  lr: [0.001, 0.0003]\nenv:\n  SEED: '{seed}'\nmax_parallel: 3\n"
    )
    request = request_for(
        project, "train.py", "--sweep-file", str(project / "sweep.yaml"), "--sweep", "seed=0,1"
    )
    assert request.sweep is not None
    assert request.sweep.grid == {"lr": ["0.001", "0.0003"], "seed": ["0", "1"]}
    assert request.sweep.env == {"SEED": "{seed}"}
    assert request.sweep.max_parallel == 3


@pytest.mark.parametrize(
    "argv",
    [
        ("--sweep", "lr"),
        ("--sweep", "lr="),
        ("--max-parallel", "2"),
        ("--retries", "1"),
    ],
)
def test_a_bad_sweep_flag_names_the_sweep(project: Path, argv: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project, "train.py", *argv)
    assert caught.value.field == "sweep"
    assert argv[0] in caught.value.message


def test_a_sweep_file_that_is_no_mapping_is_refused(project: Path) -> None:
    (project / "sweep.yaml").write_text("- lr\n")
    with pytest.raises(InvalidInput, match="expected a mapping") as caught:
        request_for(project, "train.py", "--sweep-file", str(project / "sweep.yaml"))
    assert caught.value.field == "sweep"


def test_resume_flags_set_the_jobs_attempts_and_checkpoint_folders(project: Path) -> None:
    plain = request_for(project, "train.py")
    assert plain.max_attempts is None and plain.checkpoint_dirs is None  # the server's settings
    flagged = request_for(
        project, "train.py", "--max-attempts", "0", "--checkpoint-dir", "out/ckpt/"
    )
    assert flagged.max_attempts == 0  # 0 turns resuming off for this job, not "unset"
    assert flagged.checkpoint_dirs == ["out/ckpt"]
    filed = request_for(project, config="job:\n  call_path: train.py\n  max_attempts: 5\n")
    assert filed.max_attempts == 5


def test_a_checkpoint_folder_outside_the_working_directory_is_refused(project: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_for(project, "train.py", "--checkpoint-dir", "../elsewhere")
    assert caught.value.field is not None and caught.value.field.startswith("checkpoint_dirs")
