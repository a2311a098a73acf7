#!/usr/bin/env bash
# Sets up a development environment from a fresh clone: a .venv holding j2c (editable) with its
# dev and test dependencies, the labextension built and linked, the server extension enabled.
# Re-running is cheap: dependencies are reinstalled only when their declarations change.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi

export PATH="$PWD/.venv/bin:$PATH"

# pip warns once per package about index locations that do not exist on some machines; keep
# the log readable but never hide a real failure.
pip_install() {
  local out
  if ! out=$(.venv/bin/python -m pip install -q "$@" 2>&1); then
    echo "$out" | grep -v "is ignored: it is neither a file nor a directory" >&2
    return 1
  fi
  echo "$out" | grep -v "is ignored: it is neither a file nor a directory" || true
}

stamp=.venv/.j2c-deps
want=$(cat pyproject.toml scripts/constraints.txt package.json yarn.lock | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python and JavaScript dependencies (a few minutes the first time)"
  pip_install -U pip
  # Pinned to what a known-good setup resolved (scripts/constraints.txt says why).
  pip_install -c scripts/constraints.txt -e ".[dev,test]"
  echo "$want" > "$stamp"
fi

# The image-diff tests (tests/image/) send a project whose venv leans on the lab's own base
# Python (the venv's base interpreter) having packages the platform image lacks or has in
# another version: installed there when missing (tests/support/lab_python.py LAB_PACKAGES).
lab_python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
if ! "$lab_python" -I -c 'import regex, scipy, numpy; assert int(numpy.__version__.split(".")[0]) >= 2' 2>/dev/null; then
  echo "setup: installing regex, scipy and numpy 2 into the lab's Python ($lab_python)"
  pip_out=$("$lab_python" -m pip install -q regex "scipy>=1.16" "numpy>=2" 2>&1) ||
    echo "setup: could not install them there; the image-diff tests will say so: $pip_out" >&2
fi

echo "setup: building the JupyterLab extension"
jlpm install --immutable >/dev/null
jlpm build >/dev/null 2>&1 || jlpm build
jupyter-builder develop --overwrite . >/dev/null
jupyter server extension enable j2c_server --sys-prefix >/dev/null 2>&1
echo "setup: done"
