#!/usr/bin/env bash
# Starts a throw-away JupyterHub for the hub UI tests, in the foreground (Playwright's
# webServer runs it; Ctrl-C stops it and the users' servers).
#   scripts/hub-up.sh DIR
# DIR holds the hub's database and one HOME per user (alice, bob); alice's holds a copy of
# examples/digits with its venv made on the base Python (--system-site-packages), like the
# Galata tests' root. The hub listens on http://127.0.0.1:${J2C_HUB_PORT:-8765}/hub-prefix/;
# J2C_HUB_PASSWORD and J2C_HUB_ADMIN_TOKEN are made up here unless set (the tests set them).
set -euo pipefail
dir=${1:?usage: hub-up.sh DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir/alice" "$dir/bob"
dir=$(cd "$dir" && pwd)

if [ ! -x "$dir/alice/digits/.venv/bin/python" ]; then
  rm -rf "$dir/alice/digits"
  cp -r "$repo/examples/digits" "$dir/alice/digits"
  rm -rf "$dir/alice/digits/.venv" "$dir/alice/digits/__pycache__"
  base=$(python3 -c 'import sys; print(sys.base_prefix)')/bin/python3
  "$base" -m venv --system-site-packages "$dir/alice/digits/.venv"
  if ! "$dir/alice/digits/.venv/bin/python" -c "import numpy" 2>/dev/null; then
    "$dir/alice/digits/.venv/bin/python" -m pip install -q -r "$dir/alice/digits/requirements.txt"
  fi
fi

token() { python3 -c 'import secrets; print(secrets.token_hex(32))'; }
export J2C_HUB_DIR=$dir
export J2C_HUB_PASSWORD=${J2C_HUB_PASSWORD:-$(token)}
export J2C_HUB_ADMIN_TOKEN=${J2C_HUB_ADMIN_TOKEN:-$(token)}
export J2C_HUB_PROXY_TOKEN=${J2C_HUB_PROXY_TOKEN:-$(token)}
cd "$dir"
exec jupyterhub -f "$repo/ui-tests/jupyterhub_config.py"
