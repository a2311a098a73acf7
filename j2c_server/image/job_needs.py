"""What a job needs of the Python it runs on, as the lab sees it: the one computation behind the
image report (image/check.py) and the list a manifest carries for a target not known yet.

:func:`lab_side` reads the lab: the venv's distributions, the lab base's (what
``--system-site-packages`` let pip skip) and the project's imports. :func:`job_needs` turns that
into :class:`~j2c_server.wire.manifest.JobNeeds`: every lab-base distribution the venv's
packages require (``Requires-Dist``, transitively) or the project imports, with the lab's
version and each requirement the job's packages put on it, and the venv's compiled wheels by
their tags. The target is unknown here, so markers are evaluated for the venv's Python on this
platform (the job runs that Python minor or stops: unpack/interpreter.py); ``j2c-unpack`` then
compares the list with the interpreter it runs on (unpack/needs.py), standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment

from j2c_server.image.diff import lab_glibc, needed_from_base, requirements
from j2c_server.image.needs import (
    LabDist,
    ProjectImports,
    editable_paths,
    import_roots,
    lab_dists,
    project_imports,
)
from j2c_server.pack.venv import normalize_dist_name, open_venv
from j2c_server.unpack.inventory import site_dirs
from j2c_server.wire.manifest import JobNeeds, NeededDist, NeededRequirement, NeededWheel

RUNNER = "the notebook runner"  # who imports the runner's modules (image/runner.py)


@dataclass(frozen=True)
class LabSide:
    venv: dict[str, LabDist]  # the venv's own distributions (they ship)
    base: dict[str, LabDist]  # the lab base's, less those the venv has
    base_folders: list[Path]  # the base's site folders, in sys.path order
    venv_folders: list[Path]  # the venv's site folder
    imports: ProjectImports
    python: str | None  # the venv's major.minor; None without a venv
    has_venv: bool  # a venv with system site packages (shipping the base needs one)


def lab_side(
    venv_path: Path | None,
    code_path: Path,
    skip: list[Path],
    entry: str | None = None,
    runner: Sequence[str] = (),
) -> LabSide:
    """The lab's half of the comparison (synchronous: metadata and sources are read);
    ``entry`` is the request's entry point (``call_path``), whose folder the job imports from;
    ``runner``: the modules the entry point's runner imports (a notebook's, image/runner.py),
    needed as the project's own imports are."""
    venv = open_venv(venv_path) if venv_path is not None else None
    if venv is None:
        venv_dists, base_folders, python = {}, [Path(p) for p in site_dirs()], None
    else:
        folders = [venv.site_packages] if venv.site_packages else []
        venv_dists = lab_dists(folders)
        base_folders = [Path(p) for p in venv.base.paths] if venv.base else []
        base_folders = base_folders if venv.info.include_system_site_packages else []
        python = venv.info.python_version
    base = {k: d for k, d in lab_dists(base_folders).items() if k not in venv_dists}
    site = venv.site_packages if venv is not None else None
    roots = import_roots(code_path, entry, editable_paths(site) if site else [])
    entry_file = code_path / entry if entry and not entry.startswith("-m ") else None
    imports = project_imports(
        code_path, [*skip, *([venv.root] if venv else [])], roots=roots, entry=entry_file
    )
    for module in runner:
        imports.by_module.setdefault(module, []).insert(0, RUNNER)
    has_venv = venv is not None and venv.info.include_system_site_packages
    venv_folders = [site] if site is not None else []
    return LabSide(venv_dists, base, base_folders, venv_folders, imports, python, has_venv)


def lab_marker_env(python: str | None) -> dict[str, str]:
    """PEP 508 marker values for the job's Python on this platform."""
    env: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    if python is not None and python != env["python_version"]:
        env.update(python_version=python, python_full_version=f"{python}.0")
    return env


def job_needs(side: LabSide) -> JobNeeds | None:
    """The list ``j2c-unpack`` checks; None when the job needs nothing of the base beyond the
    Python version (which the job checks anyway)."""
    env = lab_marker_env(side.python)
    needed = needed_from_base(side.venv, side.base, side.imports, env)
    wheels = [
        NeededWheel(name=dist.name, version=dist.version, tags=list(dist.tags))
        for dist in sorted(side.venv.values(), key=lambda d: d.key)
        if dist.tags
    ]
    if not needed and not wheels:
        return None
    users = [*side.venv.values(), *(side.base[key] for key in needed)]
    wanted: dict[str, list[NeededRequirement]] = {}
    for user in users:
        for req in requirements(user.requires, env):
            wanted.setdefault(normalize_dist_name(req.name), []).append(
                NeededRequirement(by=user.label, specifier=str(req.specifier))
            )
    dists = [
        NeededDist(
            name=side.base[key].name,
            version=side.base[key].version,
            why=needed[key],
            requirements=wanted.get(key, []),
        )
        for key in sorted(needed)
    ]
    python = side.python or ".".join(env["python_full_version"].split(".")[:2])
    return JobNeeds(python=python, lab_libc=lab_glibc(), dists=dists, wheels=wheels)


def needs_of(
    venv_path: Path | None,
    code_path: Path,
    skip: list[Path],
    entry: str | None = None,
    runner: Sequence[str] = (),
) -> JobNeeds | None:
    """:func:`job_needs` of the lab as it is now."""
    return job_needs(lab_side(venv_path, code_path, skip, entry, runner))
