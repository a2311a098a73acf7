"""The per-node layer cache (``--cache-dir``), through the real j2c-unpack subprocess.

Warm starts need no store, concurrent starts extract once, a crashed build is never used, an
entry in use is never evicted, a poisoned entry is refused and made again, and each placement
has its own relocated venv. The tests run as root: "another user" is uid 12345. What a tenant
who shares the cache's uid can and cannot do to it: test_cache_tenants.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import make_venv, write
from tests.unpack.conftest import JOB_PY, PublishedLab, SmallJob
from tests.unpack.helpers import UNPACK, publish_project, run_unpack

OTHER_USER = 12345
BUILT = "into the cache ("  # the log line of one venv built into the cache


def start(uri: str, cache: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*UNPACK, uri, "--cache-dir", str(cache), *options, "--"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def unpack(uri: str, cache: Path, *options: str) -> subprocess.CompletedProcess[str]:
    done = run_unpack(uri, "--cache-dir", str(cache), "--paths", "relocate", *options)
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" in done.stdout
    return done


def entries(cache: Path, prefix: str = "") -> list[Path]:
    return sorted(p for p in (cache / "entries").iterdir() if p.name.startswith(prefix))


def venv_tree(cache: Path) -> Path:
    (entry,) = entries(cache, "venv-")
    return entry / "tree"


def test_a_warm_start_needs_no_store(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    cold = unpack(uri, cache)
    assert cold.stderr.count(BUILT) == 1  # the venv; the code is extracted from its blob
    shutil.rmtree(small_job.store / "blobs")  # the store's layers are gone

    warm = unpack(uri, cache)

    assert "2 of 2 layers from the cache, 0 built" in warm.stderr
    assert "downloading" not in warm.stderr and BUILT not in warm.stderr
    assert "venv used in place" in warm.stderr
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"


def test_concurrent_starts_extract_each_layer_once(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    jobs = [start(uri, cache, "--paths", "relocate") for _ in range(3)]
    results = [(job.wait(120), *job.communicate()) for job in jobs]

    assert [code for code, _, _ in results] == [0, 0, 0], results
    assert all("USER CODE RAN" in out for _, out, _ in results)
    logs = "".join(err for _, _, err in results)
    assert logs.count(BUILT) == 1, logs  # the venv, once
    assert logs.count("downloading: 1 layer,") == 2  # the code's blob, the venv's: once each
    assert len(entries(cache, "venv-")) == 1


def big_job(tmp_path: Path, store: Path) -> str:
    """A venv with 1,500 incompressible 40 kB files: its extraction takes a while."""
    project = tmp_path / "big" / "project"
    write(project / "job.py", JOB_PY)
    venv = make_venv(tmp_path / "big" / "venv")
    [site] = venv.glob("lib/python*/site-packages")
    for number in range(1500):
        (site / "data" / f"{number // 100}").mkdir(parents=True, exist_ok=True)
        (site / "data" / f"{number // 100}" / f"{number}.bin").write_bytes(os.urandom(40_000))
    return publish_project(project, store, "job.py", venv=venv)


def test_a_build_killed_mid_extraction_is_never_used(tmp_path: Path, store: Path) -> None:
    uri = big_job(tmp_path, store)
    cache = tmp_path / "cache"
    job = start(uri, cache, "--paths", "relocate")
    deadline = time.monotonic() + 60
    while (
        not list((cache / "tmp").glob("venv-*/tree/lib/python*/site-packages/data/1"))
        and time.monotonic() < deadline
    ):
        time.sleep(0.005)
    job.send_signal(signal.SIGKILL)
    job.communicate()
    assert list((cache / "tmp").glob("venv-*")), "killed after the build ended: no crash tested"
    assert not entries(cache, "venv-")  # only a complete build is renamed into place

    again = unpack(uri, cache)

    assert "left by a build that did not finish" in again.stderr
    assert again.stderr.count(BUILT) == 1
    (venv,) = entries(cache, "venv-")
    assert len(list((venv / "tree").rglob("data/*/*.bin"))) == 1500
    assert not list((cache / "tmp").glob("venv-*"))


def test_a_planted_half_entry_is_refused(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    unpack(uri, cache)
    (venv,) = entries(cache, "venv-")
    shutil.rmtree(venv)
    (venv / "tree").mkdir(parents=True)  # as if renamed before it was complete: no meta.json
    (venv / "tree" / "pyvenv.cfg").write_text("home = /planted\n")

    again = unpack(uri, cache)

    assert "entry refused (it has no meta.json" in again.stderr
    assert "/planted" not in again.stdout + again.stderr.replace("entry refused", "")
    assert again.stderr.count(BUILT) == 1


WAIT_JOB = """\
import os, pathlib, sys, time
print("USER CODE RAN", flush=True)
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.02)
"""


def test_eviction_never_removes_an_entry_in_use(tmp_path: Path, store: Path) -> None:
    first = tmp_path / "first"
    write(first / "wait.py", WAIT_JOB)
    waiting = publish_project(first, store, "wait.py", venv=make_venv(tmp_path / "venv-1"))
    second = tmp_path / "second"
    write(second / "job.py", JOB_PY)
    other = publish_project(second, store, "job.py", venv=make_venv(tmp_path / "venv-2"))
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    running = subprocess.Popen(
        [*UNPACK, waiting, "--cache-dir", str(cache), "--paths", "relocate", "--", str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert running.stdout is not None
    assert "USER CODE RAN" in running.stdout.readline()
    in_use = entries(cache)
    assert len(in_use) == 3  # the venv + the blobs of the code and the venv

    squeezed = unpack(other, cache, "--cache-max", "1")  # every entry is over the cap

    assert "evicted" not in squeezed.stderr  # the first job's entries and its own are in use
    assert set(in_use) <= set(entries(cache))
    go.touch()
    assert running.wait(60) == 0
    running.communicate()

    after = unpack(other, cache, "--cache-max", "1")

    evicted = {line.split()[3] for line in after.stderr.splitlines() if "cache: evicted" in line}
    assert {entry.name for entry in in_use} <= evicted  # free now (and the blobs not needed)
    assert not set(in_use) & set(entries(cache))
    assert len(entries(cache, "venv-")) == 1  # in use: kept
    assert len(entries(cache, "b-")) == 1  # its code blob; a warm start needs no venv blob


def test_the_least_recently_used_entries_go_first(small_job: SmallJob, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    used: dict[str, set[str]] = {}
    for name, when in (("first", 3), ("a", 1), ("b", 2)):  # a is the least recently used
        project = tmp_path / name
        write(project / "job.py", f"# {name}\n{JOB_PY}")
        before = {e.name for e in entries(cache)} if cache.exists() else set()
        unpack(publish_project(project, small_job.store, "job.py", venv=small_job.venv), cache)
        used[name] = {e.name for e in entries(cache)} - before
        for key in used[name]:
            os.utime(cache / "locks" / f"{key}.use", (when, when))
    last = tmp_path / "last"
    write(last / "job.py", JOB_PY)
    done = unpack(
        publish_project(last, small_job.store, "job.py", venv=small_job.venv),
        cache,
        "--cache-max",
        "1",
    )

    order = [line.split()[3] for line in done.stderr.splitlines() if "cache: evicted" in line]
    a, b = len(used["a"]), len(used["b"])  # each one's code blob: the venv is first's
    assert (a, b) == (1, 1), used
    assert order[:a] == sorted(used["a"]) and order[a : a + b] == sorted(used["b"]), order
    assert not (used["a"] | used["b"]) & {e.name for e in entries(cache)}


def poison_group_writable(tree: Path) -> None:
    os.chmod(tree / "pyvenv.cfg", 0o664)


def poison_content(tree: Path) -> None:
    path = tree / "pyvenv.cfg"
    mode = path.stat().st_mode
    os.chmod(path, 0o644)
    path.write_text(path.read_text() + "# POISONED\n")
    os.chmod(path, mode)


def poison_owner(tree: Path) -> None:
    os.chown(tree / "pyvenv.cfg", OTHER_USER, OTHER_USER, follow_symlinks=False)


def poison_meta_owner(tree: Path) -> None:
    os.chown(tree.parent / "meta.json", OTHER_USER, OTHER_USER)


@pytest.mark.parametrize(
    ("poison", "why"),
    [
        (poison_group_writable, "pyvenv.cfg is writable"),
        (poison_content, "its files changed since it was built"),
        (poison_owner, "pyvenv.cfg belongs to uid 12345"),
        (poison_meta_owner, "its meta.json belongs to uid 12345"),
    ],
)
def test_a_poisoned_entry_is_refused_and_made_again(
    small_job: SmallJob, tmp_path: Path, poison: object, why: str
) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    unpack(uri, cache)
    (venv,) = entries(cache, "venv-")
    poison(venv / "tree")  # type: ignore[operator]

    again = unpack(uri, cache)

    assert f"entry refused ({why})" in again.stderr
    assert again.stderr.count(BUILT) == 1
    assert "POISONED" not in (venv / "tree" / "pyvenv.cfg").read_text()


def test_a_changed_blob_is_checked_again(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    unpack(uri, cache)
    for entry in entries(cache, "b-"):
        data = entry / "data.tar.zst"
        os.chmod(data, 0o644)
        with data.open("r+b") as handle:
            handle.write(b"\0")  # a flipped first byte: the stat changes, the digest breaks
        os.chmod(data, 0o444)

    again = unpack(uri, cache)

    assert "does not hash to sha256:" in again.stderr
    assert "downloading: 1 layer," in again.stderr  # the code's blob; the venv's tree is there


def test_each_placement_has_its_own_relocated_venv(tmp_path: Path, store: Path) -> None:
    lab = tmp_path / "lab"
    write(lab / "project" / "job.py", "import sys\nprint('PREFIX', sys.prefix)\n" + JOB_PY)
    venv = make_venv(lab / "venv")
    uri = publish_project(lab / "project", store, "job.py", venv=venv)
    lab.rename(tmp_path / "lab moved away")  # the original paths are free
    cache = tmp_path / "cache"

    relocated = unpack(uri, cache)
    again = unpack(uri, cache)
    original = run_unpack(uri, "--cache-dir", str(cache))
    original_again = run_unpack(uri, "--cache-dir", str(cache))

    in_place = venv_tree_for(cache, relocated.stdout)
    assert f"PREFIX {in_place}" in again.stdout
    assert "0 built" in again.stderr
    assert original.returncode == 0, original.stderr
    assert f"PREFIX {venv}" in original.stdout
    assert "1 of 2 layers from the cache, 1 built" in original.stderr  # the code is shared
    assert "2 of 2 layers from the cache" in original_again.stderr
    assert f"venv at {venv}: " in original_again.stderr
    assert f"PREFIX {venv}" in original_again.stdout
    assert not venv.exists()  # the job's copy is removed after it; the cache's stays
    configs = sorted((e / "tree" / "pyvenv.cfg").read_text() for e in entries(cache, "venv-"))
    assert len(configs) == 2
    assert any(c.rstrip().endswith(f" {venv}") for c in configs)
    assert any(c.rstrip().endswith(f" {in_place}") for c in configs)


def venv_tree_for(cache: Path, stdout: str) -> Path:
    (line,) = [line for line in stdout.splitlines() if line.startswith("PREFIX ")]
    path = Path(line.removeprefix("PREFIX "))
    assert path.is_relative_to(cache / "entries")
    return path


WHERE_JOB = """\
import os, pathlib, sys
prefix = pathlib.Path(sys.prefix)
[site] = prefix.glob("lib/python*/site-packages")
print("PREFIX", prefix)
print("HOME", sorted((p.name, p.is_symlink()) for p in prefix.iterdir()))
print("REAL", os.path.realpath(prefix / "pyvenv.cfg"))
print("MARKER", (site / "j2c_marker.py").read_text().strip())
print("PLANTED", (site / "zz_planted.pth").exists())
print("USER CODE RAN", flush=True)
"""


def marked_lab(tmp_path: Path, store: Path, job: str = WHERE_JOB) -> tuple[str, Path]:
    """A project and its venv (with ``j2c_marker.py``), published; its original paths free."""
    lab = tmp_path / "lab"
    write(lab / "project" / "job.py", job)
    venv = make_venv(lab / "venv")
    [site] = venv.glob("lib/python*/site-packages")
    write(site / "j2c_marker.py", "shipped = 1\n")
    uri = publish_project(lab / "project", store, "job.py", venv=venv)
    lab.rename(tmp_path / "lab moved away")
    return uri, venv


def test_a_job_writing_into_a_linked_venv_file_does_not_poison_the_cache(
    tmp_path: Path, store: Path
) -> None:
    job = (
        "import pathlib, sys\n"
        "[site] = pathlib.Path(sys.prefix).glob('lib/python*/site-packages')\n"
        "victim = site / 'j2c_marker.py'\n"
        "print('USER CODE RAN', 'SAW POISON', 'poisoned' in victim.read_text())\n"
        "with victim.open('a') as f:\n"  # root ignores the read-only mode: it succeeds
        "    f.write('poisoned = 1\\n')\n"
    )
    uri, _ = marked_lab(tmp_path, store, job)
    cache = tmp_path / "cache"

    first = run_unpack(uri, "--cache-dir", str(cache))
    second = run_unpack(uri, "--cache-dir", str(cache))

    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "SAW POISON False" in first.stdout
    assert "its files changed since it was built" in second.stderr
    assert "SAW POISON False" in second.stdout  # the entry was made again from the blob


def test_a_warm_original_start_sees_the_verified_entry_at_the_original_path(
    tmp_path: Path, store: Path
) -> None:
    uri, venv = marked_lab(tmp_path, store)
    cache = tmp_path / "cache"

    cold = run_unpack(uri, "--cache-dir", str(cache))
    warm = run_unpack(uri, "--cache-dir", str(cache))

    assert cold.returncode == 0 and warm.returncode == 0, warm.stderr
    tree = venv_tree(cache)
    assert "2 of 2 layers from the cache, 0 built" in warm.stderr
    assert f"venv at {venv}: {len(os.listdir(tree))} links into the cache entry {tree}" in (
        warm.stderr
    )
    assert f"PREFIX {venv}" in warm.stdout  # the path the venv was packed from
    assert f"REAL {tree / 'pyvenv.cfg'}" in warm.stdout  # the cache's tree, checked just now
    home = warm.stdout.split("HOME ")[1].splitlines()[0]
    assert "False" not in home  # nothing of the job's own: every top-level entry a link
    assert "MARKER shipped = 1" in warm.stdout
    assert not venv.exists()  # the links went with the job; the cache's tree stays
    assert (tree / "pyvenv.cfg").is_file()


def poison_venv_file(site: Path) -> None:
    path = site / "j2c_marker.py"
    os.chmod(path, 0o644)
    path.write_text("shipped = 'POISONED'\n")
    os.chmod(path, 0o444)


def plant_in_venv(site: Path) -> None:
    os.chmod(site, 0o755)
    write(site / "zz_planted.pth", "import sys; print('POISONED', file=sys.stderr)\n")
    os.chmod(site / "zz_planted.pth", 0o444)
    os.chmod(site, 0o555)


def remove_from_venv(site: Path) -> None:
    os.chmod(site, 0o755)
    (site / "j2c_marker.py").unlink()  # a partial tree
    os.chmod(site, 0o555)


def swap_for_a_link(site: Path) -> None:
    os.chmod(site, 0o755)
    elsewhere = site.parents[4] / "elsewhere.py"  # beside the cache, same owner and mode
    elsewhere.write_text("shipped = 'POISONED'\n")
    os.chmod(elsewhere, 0o444)
    (site / "j2c_marker.py").unlink()
    (site / "j2c_marker.py").symlink_to(elsewhere)
    os.chmod(site, 0o555)


@pytest.mark.parametrize(
    "poison", [poison_venv_file, plant_in_venv, remove_from_venv, swap_for_a_link]
)
def test_a_tampered_venv_entry_never_reaches_an_original_path_job(
    tmp_path: Path, store: Path, poison: object
) -> None:
    uri, _ = marked_lab(tmp_path, store)
    cache = tmp_path / "cache"
    assert run_unpack(uri, "--cache-dir", str(cache)).returncode == 0
    [site] = venv_tree(cache).glob("lib/python*/site-packages")
    poison(site)  # type: ignore[operator]

    again = run_unpack(uri, "--cache-dir", str(cache))

    assert again.returncode == 0, again.stderr
    assert "entry refused (its files changed since it was built)" in again.stderr
    assert again.stderr.count(BUILT) == 1  # the venv, from its verified blob
    assert "POISONED" not in again.stdout + again.stderr
    assert "MARKER shipped = 1" in again.stdout and "PLANTED False" in again.stdout


def test_a_cache_folder_others_can_write_is_not_used(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)

    done = unpack(uri, cache)

    assert "cache: not used" in done.stderr and "writable by others" in done.stderr
    assert not (cache / "entries").exists()


def test_a_bad_cap_is_an_error_naming_it(small_job: SmallJob, tmp_path: Path) -> None:
    done = run_unpack(
        small_job.publish(), "--cache-dir", str(tmp_path / "c"), "--cache-max", "lots"
    )
    assert done.returncode == 74
    assert "'lots' is not a size" in done.stderr


def lab_report(stdout: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_the_lab_venv_inside_its_project_is_linked_and_relocated_from_the_cache(
    published_lab: PublishedLab, tmp_path: Path
) -> None:
    """numpy, a console script and editable installs of project packages (which embed the
    project's path): the venv cannot run in place, so it is linked and its few files rewritten."""
    cache = tmp_path / "cache"
    runs = []
    for number in range(3):
        workdir = tmp_path / f"job-{number}"
        done = run_unpack(
            published_lab.manifest_uri,
            "--cache-dir",
            str(cache),
            "--paths",
            "relocate",
            "--workdir",
            str(workdir),
        )
        assert done.returncode == 0, done.stderr
        runs.append((workdir, done))

    for workdir, done in runs:
        result = lab_report(done.stdout)
        code = workdir / "code"
        assert result["prefix"] == str(code / ".venv")
        assert result["numpy_sum"] == 45
        assert Path(result["mylib"]).is_relative_to(code)  # editable: into this job's code
        assert Path(result["flatpkg"]).is_relative_to(code)
        assert result["hello"]
    assert runs[0][1].stderr.count(BUILT) == 1
    for _, done in runs[1:]:
        assert "2 of 2 layers from the cache, 0 built" in done.stderr  # no rewrite poisoned it
        assert "venv copied into" in done.stderr


def test_the_lab_at_its_original_paths_from_the_cache(
    original_paths_free: PublishedLab, tmp_path: Path
) -> None:
    lab = original_paths_free
    cache = tmp_path / "cache"
    first = run_unpack(lab.manifest_uri, "--cache-dir", str(cache))
    second = run_unpack(lab.manifest_uri, "--cache-dir", str(cache))

    for done in (first, second):
        assert done.returncode == 0, done.stderr
        assert lab_report(done.stdout)["prefix"] == str(lab.venv)
    # Relocated for this placement when it was cached: used as it is, nothing rewritten.
    assert f"venv at {lab.venv}: " in second.stderr and "rewritten" not in second.stderr
    assert "2 of 2 layers from the cache, 0 built" in second.stderr
    assert not lab.project.exists()  # the job's copies went; the cache keeps its own


# Like a CA-injecting site hook: appends to a file of the venv at start-up, unless already there.
APPENDING_HOOK = (
    "import os, sys; p = os.path.join(sys.prefix, 'bundle.pem'); "
    "t = open(p).read() if os.path.exists(p) else ''; "
    "'EXTRA' in t or open(p, 'a').write('EXTRA\\n')\n"
)


@pytest.mark.parametrize("placement", ["relocate", "original"])
def test_a_venv_that_edits_itself_or_lacks_bytecode_stays_warm(
    tmp_path: Path, store: Path, placement: str
) -> None:
    project = tmp_path / "lab" / "project"
    write(project / "job.py", "import shipped_module\n" + JOB_PY)  # no bytecode shipped for it
    venv = make_venv(tmp_path / "lab" / "venv")
    write(venv / "bundle.pem", "SHIPPED\n")
    [site] = venv.glob("lib/python*/site-packages")
    write(site / "zz_hook.pth", APPENDING_HOOK)
    write(site / "shipped_module.py", "VALUE = 1\n")
    uri = publish_project(project, store, "job.py", venv=venv)
    (tmp_path / "lab").rename(tmp_path / "lab moved away")  # original paths free
    cache = tmp_path / "cache"

    # As on a node: Python writes bytecode (this machine's environment turns that off).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    options = ("--cache-dir", str(cache), "--paths", placement)
    cold = run_unpack(uri, *options, env=env)
    warm = run_unpack(uri, *options, env=env)
    third = run_unpack(uri, *options, env=env)

    assert cold.returncode == 0 and "USER CODE RAN" in cold.stdout, cold.stderr
    for done in (warm, third):
        assert "2 of 2 layers from the cache, 0 built" in done.stderr, done.stderr
        assert "refused" not in done.stderr
        assert "USER CODE RAN" in done.stdout
    if placement == "original":
        assert f"venv at {venv}: " in warm.stderr and "relocating under" not in warm.stderr
