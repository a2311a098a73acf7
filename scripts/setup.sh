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

stamp=.venv/.j2c-deps
want=$(cat pyproject.toml package.json yarn.lock | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python and JavaScript dependencies (a few minutes the first time)"
  .venv/bin/python -m pip install -q -U pip
  .venv/bin/python -m pip install -q -e ".[dev,test]"
  echo "$want" > "$stamp"
fi

echo "setup: building the JupyterLab extension"
PATH="$PWD/.venv/bin:$PATH" jlpm install --immutable >/dev/null
PATH="$PWD/.venv/bin:$PATH" jlpm build >/dev/null
.venv/bin/jupyter labextension develop --overwrite . >/dev/null 2>&1
.venv/bin/jupyter server extension enable j2c_server --sys-prefix >/dev/null 2>&1
echo "setup: done"
