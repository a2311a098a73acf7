"""The manifest plan: the pydantic-free copy j2c-unpack runs on, and the node cache's plans.

The plan must never drift from the pydantic models (same fields, both ways; a dump with a
field missing or added is refused), and a warm start must take a manifest's plan from the
cache only when the same validator accepted the same bytes on this node, and then import no
pydantic at all. Through the real j2c-unpack subprocess, with a real cache folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from j2c_server.core.manifest_plan import (
    EntryPlan,
    FilePlan,
    JobNeedsPlan,
    LayerPlan,
    LayerRole,
    ManifestPlan,
    NeededDistPlan,
    NeededRequirementPlan,
    NeededWheelPlan,
    PlanError,
    VenvPlan,
)
from j2c_server.wire.manifest import (
    EntryPoint,
    FileBlob,
    JobNeeds,
    Layer,
    Manifest,
    NeededDist,
    NeededRequirement,
    NeededWheel,
    VenvInfo,
)
from tests.unpack.conftest import SmallJob

# j2c-unpack's main, then whether pydantic was ever imported by it (on stderr, last line).
_UNPACK_AND_TELL = (
    "import sys\n"
    "from j2c_server.unpack.__main__ import main\n"
    "code = main(sys.argv[1:])\n"
    "print('pydantic imported:', 'pydantic' in sys.modules, file=sys.stderr)\n"
    "sys.exit(code)\n"
)
_PAIRS: list[tuple[type[BaseModel], type]] = [
    (Manifest, ManifestPlan),
    (Layer, LayerPlan),
    (FileBlob, FilePlan),
    (EntryPoint, EntryPlan),
    (VenvInfo, VenvPlan),
    (JobNeeds, JobNeedsPlan),
    (NeededDist, NeededDistPlan),
    (NeededRequirement, NeededRequirementPlan),
    (NeededWheel, NeededWheelPlan),
]
_DIGEST = "sha256:" + "ab" * 32


def _unpack(uri: str, cache: Path, *pinned: str) -> subprocess.CompletedProcess[str]:
    options = [*pinned, "--cache-dir", str(cache), "--paths", "relocate", "--"]
    done = subprocess.run(
        [sys.executable, "-c", _UNPACK_AND_TELL, uri, *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" in done.stdout
    return done


def _manifest(**changes: object) -> Manifest:
    layer = Layer(role=LayerRole.code, digest=_DIGEST, size=1, source_path="/p")
    values: dict[str, object] = {
        "created_by": "test",
        "created_at": 1.0,
        "layers": [layer],
        "entry": EntryPoint(kind="script", target="job.py"),
        **changes,
    }
    return Manifest.model_validate(values)


@pytest.mark.parametrize(("model", "plan"), _PAIRS, ids=lambda pair: getattr(pair, "__name__", ""))
def test_every_model_field_is_in_the_plan_and_no_other(model: type[BaseModel], plan: type) -> None:
    assert set(model.model_fields) == {field.name for field in dataclasses.fields(plan)}


def test_a_full_dump_becomes_a_plan_with_the_same_values() -> None:
    blob = FileBlob(path="data/big.bin", digest=_DIGEST, size=5, mode=0o600)
    venv = VenvInfo(python_version="3.11", home="/usr/bin")
    needs = JobNeeds(
        python="3.11",
        dists=[
            NeededDist(
                name="numpy",
                version="2.4.6",
                why=["scipy 1.17.1"],
                requirements=[NeededRequirement(by="scipy 1.17.1", specifier=">=1.25.2")],
            )
        ],
        wheels=[NeededWheel(name="regex", version="1", tags=["cp311-cp311-linux_x86_64"])],
    )
    manifest = _manifest(args=["--lr", "0.1"], env={"A": "1"}, venv=venv, files=[blob], needs=needs)
    plan = ManifestPlan.from_dict(manifest.model_dump(mode="json"))
    assert plan.needs is not None and plan.needs.dists[0].requirements[0].specifier == ">=1.25.2"
    assert plan.layers[0].role is LayerRole.code
    assert plan.layer(LayerRole.code) == plan.code_layers()[0]
    assert plan.entry.describe() == manifest.entry.describe()
    assert plan.files is not None and plan.files[0].mode == 0o600
    assert plan.venv is not None and plan.venv.python_version == "3.11"
    assert (plan.args, plan.env, plan.workdir) == (["--lr", "0.1"], {"A": "1"}, ".")
    # Field for field, what the validator accepted (defaults included).
    assert dataclasses.asdict(plan) == manifest.model_dump(mode="python")


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d.pop("workdir"),  # a default not written out: never guessed
        lambda d: d.update(extra=1),  # a field the plan does not know
        lambda d: d["layers"][0].pop("media_type"),
        lambda d: d["layers"][0].update(role="data"),  # no such role
        lambda d: d.update(entry={"kind": "script"}),
        lambda d: d.update(layers=None),
    ],
    ids=["missing", "unknown", "nested-missing", "bad-role", "bad-entry", "not-a-list"],
)
def test_an_incomplete_or_unknown_dump_is_refused(spoil: object) -> None:
    dumped = _manifest().model_dump(mode="json")
    spoil(dumped)  # type: ignore[operator]
    with pytest.raises(PlanError):
        ManifestPlan.from_dict(dumped)


def test_a_warm_start_takes_the_plan_and_imports_no_pydantic(
    small_job: SmallJob, tmp_path: Path
) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    cold = _unpack(uri, cache)
    assert "entry job.py (validated) in" in cold.stderr
    assert cold.stderr.rstrip().endswith("pydantic imported: True")
    (plan,) = (cache / "plans").iterdir()
    assert oct(plan.stat().st_mode & 0o777) == "0o600"

    warm = _unpack(uri, cache)
    assert "entry job.py (validated before on this node) in" in warm.stderr
    assert warm.stderr.rstrip().endswith("pydantic imported: False")

    # Other bytes (an edit, a new manifest): validated, a second plan.
    (small_job.project / "job.py").write_text((small_job.project / "job.py").read_text() + "\n")
    edited = _unpack(small_job.publish(), cache)
    assert "(validated) in" in edited.stderr
    assert len(list((cache / "plans").iterdir())) == 2


@pytest.mark.parametrize("spoil", ["others-can-write", "not-json", "incomplete", "symlink"])
def test_a_doubtful_plan_is_refused_and_the_manifest_validated(
    small_job: SmallJob, tmp_path: Path, spoil: str
) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    _unpack(uri, cache)
    (plan,) = (cache / "plans").iterdir()
    if spoil == "others-can-write":
        os.chmod(plan, 0o666)
    elif spoil == "not-json":
        os.chmod(plan, 0o600)
        plan.write_text("{")
    elif spoil == "incomplete":
        data = json.loads(plan.read_text())
        del data["manifest"]["entry"]
        plan.write_text(json.dumps(data))
    else:
        real = tmp_path / "elsewhere.json"
        plan.rename(real)
        plan.symlink_to(real)
    again = _unpack(uri, cache)
    assert "(validated) in" in again.stderr, again.stderr
    assert again.stderr.rstrip().endswith("pydantic imported: True")
    if spoil != "symlink":
        assert f"plan {plan.name} refused" in again.stderr
    # Validated again, the plan is written again, private: the next start is warm.
    assert oct(plan.lstat().st_mode & 0o777) == "0o600" and not plan.is_symlink()
    assert "(validated before on this node)" in _unpack(uri, cache).stderr


def test_a_plan_of_another_validator_is_not_read(small_job: SmallJob, tmp_path: Path) -> None:
    """A new image (another j2c, other checks) never trusts what an older one accepted."""
    uri = small_job.publish()
    cache = tmp_path / "cache"
    _unpack(uri, cache)
    (plan,) = (cache / "plans").iterdir()
    sha, _validator = plan.stem.rsplit("-", 1)
    plan.rename(plan.with_name(f"{sha}-{'0' * 16}.json"))
    again = _unpack(uri, cache)
    assert "(validated) in" in again.stderr
    assert len(list((cache / "plans").iterdir())) == 2


def _pin(uri: str) -> list[str]:
    data = Path(uri.removeprefix("file://")).read_bytes()
    return ["--manifest-digest", "sha256:" + hashlib.sha256(data).hexdigest()]


def test_a_pinned_warm_start_imports_no_pydantic(small_job: SmallJob, tmp_path: Path) -> None:
    uri = small_job.publish()
    cache = tmp_path / "cache"
    _unpack(uri, cache, *_pin(uri))
    warm = _unpack(uri, cache, *_pin(uri))
    assert "(validated before on this node) in" in warm.stderr
    assert warm.stderr.rstrip().endswith("pydantic imported: False")


@pytest.mark.parametrize("forgery", ["other-digest", "no-digest", "other-layers", "other-env"])
def test_a_plan_of_another_manifest_is_not_used(
    small_job: SmallJob, tmp_path: Path, forgery: str
) -> None:
    """A plan file under this manifest's name, holding another manifest's plan (or claiming
    this digest with other layers or env): refused, and these bytes validated."""
    cache = tmp_path / "cache"
    first = small_job.publish()
    _unpack(first, cache)
    (plan_a,) = (cache / "plans").iterdir()
    (small_job.project / "job.py").write_text((small_job.project / "job.py").read_text() + "\n")
    second = small_job.publish()
    _unpack(second, cache)
    (plan_b,) = set((cache / "plans").iterdir()) - {plan_a}
    a, b = json.loads(plan_a.read_text()), json.loads(plan_b.read_text())
    assert b["manifest_sha256"] == plan_b.name.split("-")[0]
    if forgery == "other-digest":
        forged = a  # another manifest's plan, as it was written
        why = "it is the plan of another manifest digest"
    elif forgery == "no-digest":  # as an older j2c-unpack wrote it
        forged = {"manifest": b["manifest"]}
        why = "it names no manifest digest"
    elif forgery == "other-layers":
        forged = {**a, "manifest_sha256": b["manifest_sha256"]}  # claims b's digest
        why = "its layers, entry or env are not the fetched manifest's"
    else:
        forged = {**b, "manifest": {**b["manifest"], "env": {"INJECTED": "1"}}}
        why = "its layers, entry or env are not the fetched manifest's"
    plan_b.write_text(json.dumps(forged))
    again = _unpack(second, cache)
    assert f"plan {plan_b.name} refused ({why})" in again.stderr, again.stderr
    assert "(validated) in" in again.stderr
    assert json.loads(plan_b.read_text()) == b  # written again from these bytes
    assert "(validated before on this node)" in _unpack(second, cache).stderr


def test_a_manifest_not_in_canonical_form_keeps_no_plan(
    small_job: SmallJob, tmp_path: Path
) -> None:
    """Defaults left out (a hand-written manifest): its plan could not be checked against its
    bytes, so none is kept and every start validates it."""
    data = json.loads(Path(small_job.publish().removeprefix("file://")).read_text())
    del data["workdir"]  # "." by default
    hand_written = small_job.store / "jobs" / "hand" / "manifest.json"
    hand_written.parent.mkdir(parents=True)
    hand_written.write_text(json.dumps(data))
    uri, cache = hand_written.as_uri(), tmp_path / "cache"
    for _ in range(2):
        done = _unpack(uri, cache, *_pin(uri))
        assert "(validated) in" in done.stderr
        assert "the manifest's plan is not kept: not in j2c's canonical form" in done.stderr
    assert list((cache / "plans").iterdir()) == []


def _presigned(published: str, job: str) -> str:
    """A per-job manifest as ``storage.presign_for_jobs`` writes one: the published manifest
    with a url for each layer, this job's own (here a file URL with the job in its query)."""
    manifest = Manifest.model_validate_json(Path(published.removeprefix("file://")).read_bytes())
    store = Path(published.removeprefix("file://")).parents[2]
    layers = [
        layer.model_copy(
            update={"url": f"{store.as_uri()}/blobs/sha256/{layer.digest[7:]}.tar.zst?job={job}"}
        )
        for layer in manifest.layers
    ]
    path = store / "jobs" / job / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(manifest.model_copy(update={"layers": layers}).canonical_json())
    return path.as_uri()


def test_a_presigned_manifest_is_warm_for_the_next_job_with_that_jobs_urls(
    small_job: SmallJob, tmp_path: Path
) -> None:
    """Each job's presigned manifest has other bytes (its urls): the plan is kept without them,
    so the next job is a warm start too, and it gets its own urls, never the first job's."""
    from j2c_server.unpack.cache.plans import PlanCache
    from j2c_server.unpack.fetch import read_manifest

    published = small_job.publish()
    first, second = _presigned(published, "j1"), _presigned(published, "j2")
    cache = tmp_path / "cache"
    assert "(validated) in" in _unpack(first, cache, *_pin(first)).stderr
    warm = _unpack(second, cache, *_pin(second))
    assert "(validated before on this node) in" in warm.stderr, warm.stderr
    assert warm.stderr.rstrip().endswith("pydantic imported: False")
    (plan,) = (cache / "plans").iterdir()
    assert plan.name.startswith("bare")
    assert "url" not in plan.read_text().replace('"url":null', "").replace('"url": null', "")

    plans = PlanCache(cache / "plans", frozenset({os.getuid()}))
    got = read_manifest(second, plans, _pin(second)[1])
    assert [layer.url for layer in got.layers] == [
        layer["url"] for layer in json.loads(Path(second[7:]).read_text())["layers"]
    ]
    assert all(layer.url and layer.url.endswith("?job=j2") for layer in got.layers)


def test_a_presigned_manifest_with_a_url_that_is_no_string_is_refused(
    small_job: SmallJob, tmp_path: Path
) -> None:
    from j2c_server.unpack.cache.plans import PlanCache
    from j2c_server.unpack.errors import ManifestInvalid
    from j2c_server.unpack.fetch import read_manifest

    published = small_job.publish()
    cache = tmp_path / "cache"
    _unpack(_presigned(published, "j1"), cache)
    spoiled = json.loads(Path(_presigned(published, "j2")[7:]).read_text())
    spoiled["layers"][0]["url"] = 7
    path = tmp_path / "spoiled.json"
    path.write_text(json.dumps(spoiled))
    plans = PlanCache(cache / "plans", frozenset({os.getuid()}))
    with pytest.raises(ManifestInvalid, match="url"):
        read_manifest(path.as_uri(), plans)


@pytest.mark.parametrize("model", [Layer, FileBlob])
def test_the_url_fields_check_no_more_than_the_plan_cache_does(model: type[BaseModel]) -> None:
    """The plan cache puts a presigned manifest's urls back unvalidated but for their type: the
    model must check nothing more of them, or plan_cache.without_urls has to follow."""
    field = model.model_fields["url"]
    assert field.annotation == (str | None)
    assert field.metadata == []
