"""The compute side is one declared set: what ``j2c-unpack`` imports, followed through the whole
import graph (imports inside functions included), stays within the packages ``[tool.j2c]
compute-packages`` names and the distributions of the ``unpack`` extra (plus the standard
library): what ``scripts/platform-image.sh`` puts in an image, and nothing of the lab's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import grimp
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Distribution names whose import name differs.
IMPORT_NAMES = {"pyyaml": "yaml"}


def _reached() -> set[str]:
    graph = grimp.build_graph(
        "j2c_server", include_external_packages=True, exclude_type_checking_imports=True
    )
    todo, seen = ["j2c_server.unpack.__main__"], set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.find_modules_directly_imported_by(module))
    return seen


def _names(requirements: list[str]) -> set[str]:
    names = {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower() for req in requirements}
    return {IMPORT_NAMES.get(name, name) for name in names}


def test_j2c_unpack_reaches_only_the_compute_packages_and_the_unpack_extra() -> None:
    reached = _reached()
    compute = set(PYPROJECT["tool"]["j2c"]["compute-packages"])
    own = {m.split(".")[1] for m in reached if m.startswith("j2c_server.") and m.count(".") >= 1}
    assert own - {"_version"} <= compute, own - compute
    external = {m.split(".")[0] for m in reached if not m.startswith("j2c_server")}
    third_party = external - set(sys.stdlib_module_names)
    extra = _names(PYPROJECT["project"]["optional-dependencies"]["unpack"])
    assert third_party == extra, (third_party, extra)


def test_the_lab_gets_the_compute_side_through_the_extra_not_a_second_list() -> None:
    base = PYPROJECT["project"]["dependencies"]
    assert "j2c[unpack]" in [req.split(" ")[0] for req in base]
    assert not _names(base) & _names(PYPROJECT["project"]["optional-dependencies"]["unpack"])


def test_the_platform_image_installs_the_declared_sets() -> None:
    script = (ROOT / "scripts" / "platform-image.sh").read_text()
    assert "optional-dependencies" in script and "compute-packages" in script
    assert "pydantic zstandard" not in script  # no hand list


def test_the_compute_packages_alone_run_a_job_with_outputs(tmp_path: Path) -> None:
    """What platform-image.sh copies (``j2c_server/*.py`` and the compute packages) runs a real
    job with a venv, its outputs and its written files, with nothing else of j2c on the path:
    a data file or module of the lab side read at run time would fail here (one did: the
    packer's rule lists, read from pack/ignore.py's source)."""
    import shutil
    import subprocess

    from tests.unpack.helpers import publish_project

    image = tmp_path / "image-lib"
    (image / "j2c_server").mkdir(parents=True)
    for top in (ROOT / "j2c_server").glob("*.py"):
        shutil.copy(top, image / "j2c_server" / top.name)
    for package in PYPROJECT["tool"]["j2c"]["compute-packages"]:
        shutil.copytree(
            ROOT / "j2c_server" / package,
            image / "j2c_server" / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path('made.txt').write_text('x')\n"
        "pathlib.Path('.env').write_text('TOKEN=1')\n"
        "pathlib.Path(os.environ['J2C_OUTPUT_DIR'], 'out.txt').write_text('y')\n"
        "print('ran')\n"
    )
    manifest = publish_project(project, tmp_path / "store", "train.py")
    # The interpreter's own packages (the venv's site-packages: pydantic, zstandard...) stay;
    # j2c_server comes from the copied tree only.
    site = [p for p in sys.path if p.endswith("site-packages")]
    code = (
        "import sys; sys.path[:0] = sys.argv[1:3]; "
        "import j2c_server; assert j2c_server.__file__.startswith(sys.argv[1]); "
        "from j2c_server.unpack.__main__ import main; sys.argv = [sys.argv[0], *sys.argv[3:]]; "
        "sys.exit(main())"
    )
    out = tmp_path / "outputs"
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            code,
            str(image),
            *site[:1],
            manifest,
            "--workdir",
            str(tmp_path / "work"),
            "--output-uri",
            (tmp_path / "up").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "J2C_OUTPUT_DIR": str(out)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran" in done.stdout
    uploaded = {p.name for p in (tmp_path / "up").rglob("*") if p.is_file()}
    assert {"made.txt", "out.txt"} <= uploaded, uploaded
    assert ".env" not in uploaded  # the secret rules travel with the compute side
