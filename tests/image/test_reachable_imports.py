"""Which imports surely run when the entry point runs (``ProjectImports.reachable``: what an
import nothing provides refuses a send for). Found on minGPT's ``projects/adder/adder.py``, a
real project sent as a newcomer would: the send was refused for ``regex`` (imported by
``mingpt/bpe.py``, which nothing the entry imports imports) and ``transformers`` (imported
inside ``GPT.from_pretrained``, which the entry never calls). A module reaches its packages'
``__init__.py`` and the submodules it names, not its package's other files; an import inside a
function of an imported module runs only if called; the entry's own functions are what runs."""

from __future__ import annotations

from pathlib import Path

from j2c_server.image.needs import import_roots, project_imports


def _reachable(root: Path, files: dict[str, str], entry: str) -> dict[str, list[str]]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = project_imports(root, [], import_roots(root, entry), root / entry)
    assert found.reachable is not None
    return found.reachable


MINGPT = {
    "mingpt/__init__.py": "",
    "mingpt/utils.py": "import numpy as np\nimport torch\n",
    "mingpt/model.py": (
        "import torch\nfrom mingpt.utils import CfgNode\n"
        "class GPT:\n    @classmethod\n    def from_pretrained(cls):\n"
        "        from transformers import GPT2LMHeadModel\n"
    ),
    "mingpt/trainer.py": "import torch\nfrom mingpt.utils import CfgNode\n",
    "mingpt/bpe.py": "import regex as re\nimport requests\n",
    "projects/adder/adder.py": (
        "import torch\nfrom mingpt.model import GPT\nfrom mingpt.trainer import Trainer\n"
    ),
}


def test_a_sibling_module_and_a_function_level_import_do_not_count(tmp_path: Path) -> None:
    reachable = _reachable(tmp_path, MINGPT, "projects/adder/adder.py")
    assert sorted(reachable) == ["numpy", "torch"]
    assert reachable["numpy"] == ["mingpt/utils.py"]
    # What the whole tree imports is still known (the image report names it, not refusing).
    everything = project_imports(tmp_path, [], import_roots(tmp_path, "projects/adder/adder.py"))
    assert {"regex", "requests", "transformers"} <= set(everything.by_module)


def test_what_the_entry_names_runs_with_its_packages_init_and_relative_imports(
    tmp_path: Path,
) -> None:
    files = {
        "pkg/__init__.py": "import yaml\n",
        "pkg/sub/__init__.py": "from . import data\nfrom ..helpers import util\n",
        "pkg/sub/data.py": "import pandas\n",
        "pkg/helpers.py": "import requests\n",
        "pkg/unused.py": "import regex\n",
        "train.py": "from pkg import sub\n\ndef main():\n    import torch\n",
    }
    reachable = _reachable(tmp_path, files, "train.py")
    # The entry's own function-level import counts: its functions are what runs.
    assert sorted(reachable) == ["pandas", "requests", "torch", "yaml"]
    assert reachable["requests"] == ["pkg/helpers.py"]
