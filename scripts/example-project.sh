#!/usr/bin/env bash
# Prepares a working copy of examples/digits under $LAB_ROOT (default .lab/) with its venv
# made on top of the platform Python (--system-site-packages). Prints the project's path.
set -euo pipefail
cd "$(dirname "$0")/.."

root=${LAB_ROOT:-$PWD/.lab}
project="$root/digits"
if [ ! -d "$project" ]; then
  mkdir -p "$root"
  cp -r examples/digits "$project"
fi
if [ ! -x "$project/.venv/bin/python" ]; then
  echo "example: creating the project's venv (--system-site-packages)" >&2
  base=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')/bin/python3
  "$base" -m venv --system-site-packages "$project/.venv"
  "$project/.venv/bin/python" -m pip install -q -r "$project/requirements.txt" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
fi
echo "$project"
