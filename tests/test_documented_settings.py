"""Every setting the docs name loads through the real settings loader (``load_settings`` reading
a ``j2c.yaml``, as an operator writes it): ``pack.watch_venv: false`` was documented in
docs/packing.md and refused as an unknown key.

Read from docs/*.md, README.md and benchmarks/README.md:

- the settings tables (``| key | default | meaning |``): each row's keys, under the section the
  ``**Settings** (`scheduler.slurm.*` ...)`` line above the table names when they are bare; a
  table of bare keys under no section is the lab extension's (docs/ui.md, ``j2c:plugin``):
  those must be properties of its settings schema, ``schema/plugin.json``;
- every inline ``key: value`` whose key starts with a settings section (``pack.watch_venv:
  false``): loaded with the value the docs give;
- every other inline dotted name that starts with a settings section (``outputs.max_file_mb``),
  except file names and the few names below that are not settings.

A key with no value in the docs is loaded with its default (read from the defaults), so the key
itself is what is tested; an unknown key is loaded with a placeholder and the loader's refusal
is the failure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from j2c_server.config import J2CSettings, load_settings

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "README.md",
    REPO / "benchmarks" / "README.md",
]
SECTIONS = set(J2CSettings.model_fields)
# Dotted names in the docs that start like a setting and are not one.
NOT_SETTINGS = {
    "mlflow.source.git.commit": "an MLflow tag j2c sets on a run",
    "mlflow.tracking_uri": "MLflow's own name for the tracking server",
    "pack.pack": "the function pack() of j2c_server/pack",
    "pack.publish": "the module pack/publish.py",
    "outputs.ranks": "a design docs/results.md says was not taken (why not ...)",
}
FILE_ENDINGS = {"py", "md", "json", "db", "sqlite3", "yaml", "yml", "log", "toml", "ts", "txt"}
INLINE = re.compile(r"`([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)(?:: ([^`]+))?`")
TABLE_HEADER = re.compile(r"^\| key \| default \|")
SETTINGS_LINE = re.compile(r"\*\*Settings\*\* \(`([a-z_.]+)\.\*`")
PLACEHOLDER = "<not a setting>"


def _table_keys(text: str) -> tuple[set[str], set[str]]:
    """The keys of the settings tables: the server's (dotted), and the lab extension's."""
    server: set[str] = set()
    lab: set[str] = set()
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if not TABLE_HEADER.match(line):
            continue
        above = "\n".join(lines[max(0, n - 3) : n])
        prefix = match[1] if (match := SETTINGS_LINE.search(above)) else ""
        for row in lines[n + 2 :]:
            if not row.startswith("|"):
                break
            cell = row.split("|")[1]
            for key in re.findall(r"`([A-Za-z][A-Za-z0-9_.*]*)`", cell):
                full = f"{prefix}.{key}" if prefix and "." not in key else key
                if "*" in full:
                    continue
                (server if full.split(".")[0] in SECTIONS else lab).add(full)
    return server, lab


LAB_KEYS = {key for doc in DOCS for key in _table_keys(doc.read_text())[1]}


def documented() -> dict[str, set[str | None]]:
    """Each documented key and the values the docs give it (None: none given)."""
    found: dict[str, set[str | None]] = {}
    for doc in DOCS:
        text = doc.read_text()
        for key in _table_keys(text)[0]:
            found.setdefault(key, set()).add(None)
        for match in INLINE.finditer(text):
            key, value = match[1], match[2]
            if key.split(".")[0] not in SECTIONS or key in NOT_SETTINGS:
                continue
            if value is None and key.rsplit(".", 1)[1] in FILE_ENDINGS:
                continue
            found.setdefault(key, set()).add(value)
    return found


DOCUMENTED = documented()


def _nested(key: str, value: Any) -> dict[str, Any]:
    for part in reversed(key.split(".")):
        value = {part: value}
    return value  # type: ignore[no-any-return]


def _lookup(tree: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return PLACEHOLDER
        tree = tree[part]
    return tree


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    empty = tmp_path_factory.mktemp("defaults") / "j2c.yaml"
    empty.write_text("{}\n")
    return load_settings(config_file=empty, environ={}).model_dump(mode="json")


def test_the_docs_name_settings_in_tables_and_in_the_text() -> None:
    assert {"pack.compression_level", "scheduler.slurm.partition", "storage.shared"} <= set(
        DOCUMENTED
    )
    assert "false" in DOCUMENTED["pack.watch_venv"]
    assert len(DOCUMENTED) > 60


@pytest.mark.parametrize(
    ("key", "value"),
    sorted(
        ((key, value) for key, values in DOCUMENTED.items() for value in values),
        key=lambda kv: (kv[0], str(kv[1])),
    ),
)
def test_a_documented_setting_loads(
    key: str, value: str | None, defaults: dict[str, Any], tmp_path: Path
) -> None:
    given = _lookup(defaults, key) if value is None else yaml.safe_load(value)
    config = tmp_path / "j2c.yaml"
    config.write_text(yaml.safe_dump(_nested(key, given)))
    settings = load_settings(config_file=config, environ={})  # the loader refuses unknown keys
    assert _lookup(settings.model_dump(mode="json"), key) == given, f"{key}: not what was written"


def test_the_lab_settings_the_docs_list_are_the_extensions_schema() -> None:
    """docs/ui.md's table against schema/plugin.json, both ways."""
    schema = json.loads((REPO / "schema" / "plugin.json").read_text())
    assert set(schema["properties"]) == LAB_KEYS
