#!/usr/bin/env bash
# Serves JupyterLab with j2c on the embedded defaults (local object store, local scheduler),
# on a working copy of the example project with its venv made on top of the platform Python.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

root=${J2C_LAB_ROOT:-$PWD/.lab}
project="$root/digits"
if [ ! -d "$project" ]; then
  mkdir -p "$root"
  cp -r examples/digits "$project"
fi
if [ ! -x "$project/.venv/bin/python" ]; then
  echo "lab: creating the example's venv (--system-site-packages)"
  base=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')/bin/python3
  "$base" -m venv --system-site-packages "$project/.venv"
  "$project/.venv/bin/python" -m pip install -q -r "$project/requirements.txt"
fi

exec jupyter lab --ServerApp.root_dir="$root" --ServerApp.ip=127.0.0.1 --no-browser \
  --ServerApp.allow_root=True "$@"
