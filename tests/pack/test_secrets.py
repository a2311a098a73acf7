"""Secrets stay out of both layers: by name, by content, and never through a swapped file."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from j2c_server.core import secret_rules
from j2c_server.core.errors import PackError
from j2c_server.core.secret_rules import detect
from j2c_server.pack import ExcludeRule, PackPlan, PackSpec, pack, preflight
from j2c_server.pack import packer as packer_module
from j2c_server.pack import secrets as secrets_module
from j2c_server.pack.ignore import CodeRules
from j2c_server.pack.scan import scan_code
from j2c_server.pack.secrets import VerdictCache
from j2c_server.wire.manifest import LayerRole
from tests.pack.archives import names
from tests.support.projects import add_distribution, backdate, make_venv, site_packages, write


def excluded(plan: PackPlan, rule: ExcludeRule, layer: LayerRole) -> list[str]:
    return next((g.paths for g in plan.excluded if g.rule == rule and g.layer == layer), [])


def reasons(plan: PackPlan, layer: LayerRole) -> dict[str, str]:
    group = next(
        (g for g in plan.excluded if g.rule == ExcludeRule.secret and g.layer == layer), None
    )
    return group.reasons if group is not None else {}


def shipped(spec: PackSpec, cache: Path, role: LayerRole) -> list[str]:
    layer = pack(spec, cache).layer(role)
    assert layer is not None
    return names(layer.path)


# Built at run time, so that this file holds no token a scanner would flag.
def fake_key(kind: str = "OPENSSH ") -> str:
    body = base64.b64encode(bytes(range(256)) * 3).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join(
        [f"-----BEGIN {kind}PRIVATE KEY-----", *lines, f"-----END {kind}PRIVATE KEY-----"]
    )


ALNUM = "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zC3eF5hJ7kL9"
GITHUB = "gh" + "p_" + ALNUM[:36]
FINE_GRAINED = "github" + "_pat_" + "11ABCDEFG0" + ALNUM + "_" + ALNUM + ALNUM[:10]
SLACK = "xo" + "xb-" + "123456789012-1234567890123-" + ALNUM[:24]
HUGGING_FACE = "h" + "f_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "ZZZZZZZZZZ"
JWT = (
    ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
        for part in ({"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "someone"})
    )
    + "."
    + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (fake_key(), "private key block"),
        (fake_key("RSA "), "private key block"),
        (fake_key("EC "), "private key block"),
        (fake_key(""), "private key block"),
        (fake_key("PGP ").replace("KEY-----", "KEY BLOCK-----", 1), "private key block"),
        (f"aws_access_key_id = AKIA{'Q' * 16}\naws_secret_access_key = {AWS_SECRET}\n",
         "AWS secret access key"),
        (f'TOKEN = "{GITHUB}"\n', "GitHub token"),
        (f"token: {FINE_GRAINED}\n", "GitHub token"),
        (f"SLACK = '{SLACK}'\n", "Slack token"),
        (f"export HF_TOKEN={HUGGING_FACE}\n", "Hugging Face token"),
        (json.dumps({"type": "service_account", "private_key": fake_key("")}),
         "GCP service account key"),
        (f"Authorization: Bearer {JWT}\n", "JWT"),
    ],
    ids=["openssh", "rsa", "ec", "pkcs8", "pgp", "aws", "github", "github-fine-grained",
         "slack", "hugging-face", "gcp-service-account", "jwt"],
)  # fmt: skip
def test_detector_names_each_token_format(text: str, reason: str) -> None:
    assert detect(text.encode()) == reason


@pytest.mark.parametrize(
    "text",
    [
        'MARKER = "-----BEGIN RSA PRIVATE KEY-----"\nif line == MARKER:\n    parse()\n',
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "from huggingface_hub import hf_hub_download\npath = hf_hub_download(repo_id='x')\n",
        "prefix = 'eyJ'  # every JSON object in base64 starts like this\n",
        "the ghost_protocol of the slack channel, xox\n",
    ],
    ids=["key-marker-in-code", "aws-documentation-example", "hf-identifiers", "eyj", "words"],
)
def test_detector_leaves_ordinary_code_alone(text: str) -> None:
    assert detect(text.encode()) is None


def test_venv_layer_leaves_out_secrets_by_name(tmp_path: Path, project: Path, cache: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    write(venv / "pip.conf", "[global]\nindex-url = https://user:s3cret@pypi.example/simple\n")
    write(venv / ".env", "API_TOKEN=do-not-ship\n")
    write(venv / ".ssh" / "id_rsa", "key\n")
    write(venv / "share" / "jupyter" / "runtime" / "jpserver-1234.json", '{"token": "x"}')
    backdate(venv)
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv)
    plan = preflight(spec)
    assert excluded(plan, ExcludeRule.secret, LayerRole.venv) == [
        ".env",
        ".ssh/",
        "pip.conf",
        "share/jupyter/runtime/jpserver-1234.json",
    ]
    assert reasons(plan, LayerRole.venv)["pip.conf"] == "name 'pip.conf'"
    files = shipped(spec, cache, LayerRole.venv)
    assert not {"pip.conf", ".env", ".ssh/id_rsa"} & set(files)
    assert "pyvenv.cfg" in files
    assert any(w.code == "secret" and w.message.startswith("venv:") for w in plan.warnings)


def test_project_that_is_its_venv_ships_no_secret_in_either_layer(
    tmp_path: Path, cache: Path
) -> None:
    venv = make_venv(tmp_path / "env-project")
    write(venv / "train.py", "print('hi')\n")
    write(venv / ".env", "API_TOKEN=do-not-ship\n")
    write(venv / "notes.txt", fake_key())
    backdate(venv)
    spec = PackSpec(code_path=venv, call_path="train.py", venv_path=venv)
    result = pack(spec, cache)
    for packed in result.layers:
        assert not {".env", "notes.txt"} & set(names(packed.path)), packed.layer.role
    plan = preflight(spec)
    assert excluded(plan, ExcludeRule.secret, LayerRole.venv) == [".env", "notes.txt"]


def test_package_files_in_the_venv_are_not_secrets_until_edited(
    tmp_path: Path, project: Path, cache: Path
) -> None:
    venv = make_venv(tmp_path / "venv")
    add_distribution(
        venv,
        "serverkit",
        files={
            "serverkit/__init__.py": "",
            "serverkit/test/test.key": fake_key("RSA "),  # a package's own test key
            "serverkit/token": "not a user's token\n",
        },
    )
    write(venv / "lib" / "certs.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n")  # no rule for CAs
    backdate(venv)
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv)
    files = shipped(spec, tmp_path / "c1", LayerRole.venv)
    assert {"serverkit/test/test.key", "serverkit/token"} <= {
        n.split("site-packages/")[-1] for n in files
    }
    assert "lib/certs.pem" in files
    # The user pastes a key into an installed file later: it is theirs now.
    key = site_packages(venv) / "serverkit" / "test" / "test.key"
    key.write_text(fake_key("RSA ") + "\n")
    os.utime(key, (2_000_000_000, 2_000_000_000))
    plan = preflight(spec)
    rel = key.relative_to(venv).as_posix()
    assert reasons(plan, LayerRole.venv) == {rel: "private key block"}


@pytest.mark.parametrize(
    "path",
    [
        "credentials.json",
        "client_secret_1234.apps.json",
        "service-account-prod.json",
        "token",
        ".token",
        "kubeconfig",
        "prod.kubeconfig",
        ".vault-token",
        ".s3cfg",
        ".boto",
        ".my.cnf",
        "secrets.yaml",
        "config/secrets.yml",
        "secrets.toml",
        "secrets.json",
        ".huggingface/token",
        "home/.cache/huggingface/token",
        ".kaggle/kaggle.json",
        ".config/gh/hosts.yml",
        ".config/gcloud/credentials.db",
        ".databrickscfg",
        "infra/terraform.tfstate",
        ".terraform.d/credentials.tfrc.json",
        "keys/putty.ppk",
        "keys/client.der",
        ".pip/pip.conf",
        ".cargo/credentials.toml",
        ".gem/credentials",
        "home/.docker/config.json",
        ".dockercfg",
        "rclone.conf",
        ".local/share/jupyter/runtime/jpserver-4242.json",
        ".bash_history",
        ".zsh_history",
        ".python_history",
        ".sqlite_history",
        ".psql_history",
    ],
)
def test_credential_files_are_left_out_by_name(spec: PackSpec, project: Path, path: str) -> None:
    write(project / path, "x\n")
    left_out = excluded(preflight(spec), ExcludeRule.secret, LayerRole.code)
    assert any(path == p or path.startswith(p) for p in left_out), left_out


def test_key_hard_linked_under_another_name_is_found_by_content(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    key = project / "keys" / "id_rsa"
    key.write_text(fake_key())
    os.link(key, project / "notes.txt")
    plan = preflight(spec)
    assert "notes.txt" in excluded(plan, ExcludeRule.secret, LayerRole.code)
    assert reasons(plan, LayerRole.code)["notes.txt"] == "private key block"
    result = pack(spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None and "notes.txt" not in names(code.path)
    warning = next(w for w in result.warnings if w.code == "secret")
    assert "notes.txt (private key block)" in warning.message


def test_token_pasted_into_a_script_is_left_out(spec: PackSpec, project: Path) -> None:
    write(project / "upload.py", f'import os\nTOKEN = "{HUGGING_FACE}"\n')
    plan = preflight(spec)
    assert reasons(plan, LayerRole.code)["upload.py"] == "Hugging Face token"


def test_included_secret_ships_with_a_warning(project: Path, venv: Path, cache: Path) -> None:
    write(project / "notes.txt", fake_key())
    spec = PackSpec(
        code_path=project, call_path="train.py", venv_path=venv, includes=["notes.txt", ".env"]
    )
    result = pack(spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None and {"notes.txt", ".env"} <= set(names(code.path))
    warning = next(w for w in result.warnings if w.code == "secret_included")
    assert "notes.txt (private key block)" in warning.message
    assert ".env (name '.env*')" in warning.message


def test_include_can_name_a_file_in_the_venv(tmp_path: Path, project: Path, cache: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    write(venv / "pip.conf", "[global]\nindex-url = https://pypi.example/simple\n")
    spec = PackSpec(
        code_path=project,
        call_path="train.py",
        venv_path=venv,
        includes=[str(venv / "pip.conf")],
    )
    assert "pip.conf" in shipped(spec, cache, LayerRole.venv)
    assert any(
        w.code == "secret_included" and "pip.conf" in w.message for w in preflight(spec).warnings
    )


def test_large_and_binary_files_are_not_read(spec: PackSpec, project: Path) -> None:
    big = "x" * secret_rules.SIZE_CAP + fake_key()
    write(project / "big.txt", big)
    (project / "blob.bin").write_bytes(b"\0\1\2" + fake_key().encode())
    plan = preflight(spec)
    assert {"big.txt", "blob.bin"}.isdisjoint(excluded(plan, ExcludeRule.secret, LayerRole.code))


def test_verdicts_are_cached_by_stat(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets_module, "RACY_WINDOW_NS", 0)
    write(project / "notes.txt", "nothing to see\n")
    cache_dir = tmp_path / "verdicts"

    def scan() -> tuple[VerdictCache, list[str]]:
        verdicts = VerdictCache(cache_dir, project)
        layer = scan_code(project, CodeRules([], []), None, verdicts=verdicts)
        return verdicts, layer.excluded.get(ExcludeRule.secret, [])

    first, _ = scan()
    assert first.reads > 3
    second, found = scan()
    assert second.reads == 0 and "notes.txt" not in found
    write(project / "notes.txt", fake_key())  # new content: new mtime, size and ctime
    third, found = scan()
    assert third.reads == 1 and "notes.txt" in found


def test_files_changed_just_now_are_read_again(project: Path, tmp_path: Path) -> None:
    write(project / "fresh.txt", "written a moment ago\n")
    os.utime(project / "fresh.txt", (1_700_000_000, 1_700_000_000))  # mtime old, ctime now
    cache_dir = tmp_path / "verdicts"
    for _ in range(2):
        verdicts = VerdictCache(cache_dir, project)
        scan_code(project, CodeRules([], []), None, verdicts=verdicts)
    assert verdicts.reads >= 1  # fresh.txt was not cached: a same-tick rewrite could follow


def test_pack_spec_cache_dir_keeps_verdicts(
    spec: PackSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets_module, "RACY_WINDOW_NS", 0)
    cached = spec.model_copy(update={"secret_scan_cache": tmp_path / "layers"})
    preflight(cached)
    assert list((tmp_path / "layers" / "secret-scan").glob("*.json"))


def _swap_after_scan(
    monkeypatch: pytest.MonkeyPatch,
    swap: callable,  # type: ignore[valid-type]
) -> None:
    real_prepare = packer_module.prepare

    def prepare_then_swap(spec: PackSpec) -> object:
        prepared = real_prepare(spec)
        swap()
        return prepared

    monkeypatch.setattr(packer_module, "prepare", prepare_then_swap)


def test_file_swapped_for_a_symlink_after_the_scan_is_not_followed(
    spec: PackSpec, project: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = write(tmp_path / "home" / ".ssh" / "id_ed25519", fake_key())
    target = project / "mypkg" / "model.py"

    def swap() -> None:
        target.unlink()
        os.symlink(outside, target)

    _swap_after_scan(monkeypatch, swap)
    with pytest.raises(PackError) as caught:
        pack(spec, cache)
    assert caught.value.field == "code_path"
    assert "mypkg/model.py" in caught.value.message and "symlink" in caught.value.message
    assert not list((cache / "blobs").glob("*.tar.zst"))


def test_file_swapped_for_another_file_after_the_scan_is_not_read(
    spec: PackSpec, project: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = write(tmp_path / "home" / "secret.txt", "x = 1\n")
    target = project / "mypkg" / "model.py"

    def swap() -> None:
        os.link(outside, project / "mypkg" / ".swap")
        os.replace(project / "mypkg" / ".swap", target)  # same size is possible: not trusted

    _swap_after_scan(monkeypatch, swap)
    with pytest.raises(PackError) as caught:
        pack(spec, cache)
    assert "mypkg/model.py" in caught.value.message and "replaced" in caught.value.message


def test_a_package_folder_named_like_a_secret_file_ships(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    write(project / "nlp" / "token" / "__init__.py", "def split(text):\n    return text.split()\n")
    write(project / ".envs" / ".production" / ".django", "SECRET_KEY=x\n")  # cookiecutter layout
    plan = preflight(spec)
    left_out = excluded(plan, ExcludeRule.secret, LayerRole.code)
    assert "nlp/token/" not in left_out and ".envs/" in left_out
    assert "nlp/token/__init__.py" in shipped(spec, cache, LayerRole.code)


def test_one_scan_reads_a_bounded_amount_and_the_next_goes_on(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets_module, "RACY_WINDOW_NS", 0)
    monkeypatch.setattr(secrets_module, "READ_BUDGET", 40_000)
    for index in range(10):
        write(project / "labels" / f"{index:02}.json", "{}" + " " * 9_998)  # 10 kB each
    write(project / "labels" / "99.json", json.dumps({"token": GITHUB, "pad": " " * 9_900}))
    spec = PackSpec(code_path=project, call_path="train.py", secret_scan_cache=tmp_path / "layers")
    first = preflight(spec)
    assert "labels/99.json" not in excluded(first, ExcludeRule.secret, LayerRole.code)
    assert any(w.code == "secret_scan_incomplete" for w in first.warnings)
    for _ in range(5):  # each scan judges ~40 kB more, the cache keeps what was judged
        plan = preflight(spec)
    assert reasons(plan, LayerRole.code)["labels/99.json"] == "GitHub token"
    assert not any(w.code == "secret_scan_incomplete" for w in plan.warnings)


def test_entry_point_holding_a_token_is_refused_with_the_reason(project: Path, venv: Path) -> None:
    write(project / "train.py", f'TOKEN = "{SLACK}"\n')
    with pytest.raises(PackError) as caught:
        preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert caught.value.field == "call_path" and "Slack token" in caught.value.message
