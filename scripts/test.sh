#!/usr/bin/env bash
# Sets up and runs every check, in the order a failure is cheapest to find:
# lint and types, then Python tests (with a throw-away Slurm), then UI tests in Chromium, then
# the same UI behind a real JupyterHub.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - started ))s)"; }

step "setup"
bash scripts/setup.sh
bash scripts/ensure-chromium.sh
export PATH="$PWD/.venv/bin:$PATH"

step "ruff"
ruff check .
ruff format --check .

step "mypy (strict)"
mypy j2c_server

step "import boundaries (import-linter)"
lint-imports

step "generated TypeScript models are current"
python -m j2c_server.server.schema_export --check

step "prettier + eslint"
jlpm lint:check

step "pytest"
slurm_dir=$(mktemp -d -t j2c-slurm-XXXXXX)
podman_dir=$(mktemp -d -t j2c-podman-XXXXXX)
cleanup() {
  bash scripts/slurm-down.sh "$slurm_dir" || true
  bash scripts/platform-image.sh "$podman_dir" --stop || true
}
trap cleanup EXIT
# The tests read the cluster's settings from $J2C_SLURM_DIR/env: pytest's own environment
# stays free of j2c settings (they would change every test's defaults).
bash scripts/slurm-up.sh "$slurm_dir" >/dev/null
export J2C_SLURM_DIR=$slurm_dir SLURM_CONF=$slurm_dir/etc/slurm.conf
# The platform image (cached by its recipe) and podman's Docker Engine API, for the container
# scheduler's tests, read from $J2C_PODMAN_DIR/env like Slurm's; without podman here (exit 2)
# those tests run the script themselves and skip.
bash scripts/platform-image.sh "$podman_dir" >/dev/null || [[ $? -eq 2 ]]
export J2C_PODMAN_DIR=$podman_dir
python -m pytest -q -p no:cacheprovider

step "UI tests (Galata, Chromium)"
(
  cd ui-tests
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 jlpm install --immutable >/dev/null
  CI=1 jlpm playwright test
  # Against a Lab of its own that tracks jobs in a real MLflow server (about a minute).
  CI=1 jlpm playwright test -c playwright.tracking.config.js
)

step "UI tests behind JupyterHub (Playwright, base URL /hub-prefix/)"
# A real hub (scripts/hub-up.sh) with two users, started and stopped by Playwright.
(
  cd ui-tests
  CI=1 jlpm playwright test -c playwright.hub.config.js
)

step "all checks passed"
