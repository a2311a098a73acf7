#!/usr/bin/env bash
# The main job on the embedded defaults (local object store, local scheduler): sends the example
# project once with the j2c CLI (its log streams here; re-running attaches to the same job),
# then serves JupyterLab on that workspace, where the job shows in the Compute panel.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

project=$(bash scripts/example-project.sh)
root=$(dirname "$project")

echo "lab: sending the example job (local scheduler, file:// store)"
(cd "$project" && j2c submit train.py --venv-path .venv -- --epochs 5)

# The kernels inherit it: %j2c then proposes the venv by the form's rule (j2c_server/jobs/send/proposal.py).
export J2C_SERVER_ROOT="$root"
# The URL with its token, as `jupyter lab` prints it (the server reads $JUPYTER_TOKEN): opened as
# printed, it logs in. A token given in the environment is kept.
if [ -z "${JUPYTER_TOKEN:-}" ]; then
  JUPYTER_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(24))')
  export JUPYTER_TOKEN
fi
echo "lab: serving JupyterLab on http://127.0.0.1:${LAB_PORT:-8888}/lab?token=$JUPYTER_TOKEN"
exec jupyter lab --ServerApp.root_dir="$root" --ServerApp.ip=127.0.0.1 --no-browser \
  --ServerApp.port="${LAB_PORT:-8888}" --ServerApp.allow_root=True "$@"
