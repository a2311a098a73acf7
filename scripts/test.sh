#!/usr/bin/env bash
# Sets up and runs every check, in the order a failure is cheapest to find:
# lint and types, then Python tests (with a throw-away Slurm), then the container tests again
# as a non-root user on rootless podman, then UI tests in Chromium, then the same UI behind a
# real JupyterHub.
#
# With CI=true (.ci/run sets it; most CI services do too) a test whose engine cannot be had
# (podman, Slurm, Ray, the lab Python's packages, a small tmpfs) fails instead of skipping
# (tests/support/ci.py), and so does the rootless leg: a CI run cannot go green by skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - started ))s)"; }

step "setup"
bash scripts/setup.sh
bash scripts/ensure-chromium.sh
bash scripts/ensure-torch.sh
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
rootless_dir=$(mktemp -d -t j2c-rootless-XXXXXX)
cleanup() {
  bash scripts/slurm-down.sh "$slurm_dir" || true
  bash scripts/platform-image.sh "$podman_dir" --stop || true
  bash scripts/rootless-podman.sh "$rootless_dir" --stop || true
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

step "container tests as a non-root user on its own rootless podman"
# The server and the engine both that user's, as docs/operators.md advises for a shared machine:
# the warm start from the node cache, the folders a job gets, a send, its live log and a cancel
# through the server. About 30 s (a fresh machine: + ~15 s to copy the platform image over).
ROOTLESS_TESTS=(
  tests/schedulers/test_container_cache.py::test_the_second_job_of_a_manifest_starts_warm_and_leaves_no_container
  tests/schedulers/test_container_hardening.py::test_no_folder_j2c_makes_for_a_container_job_is_world_writable
  tests/schedulers/test_container_server.py::test_a_sent_job_streams_live_lines_succeeds_and_serves_its_artifacts
  tests/schedulers/test_container_server.py::test_cancel_stops_the_container_and_the_job_is_cancelled
)
image=$(sed -n 's/^export PLATFORM_IMAGE=//p' "$podman_dir/env" 2>/dev/null || true)
rootless=0
if [[ -n "$image" ]]; then
  bash scripts/rootless-podman.sh "$rootless_dir" "$image" >/dev/null || rootless=$?
else
  rootless=2 && echo "no platform image (podman could not be had)" >&2
fi
if [[ $rootless -eq 0 ]]; then
  rl_user=$(sed -n 's/^export ROOTLESS_USER=//p' "$rootless_dir/env")
  rl_home=$(sed -n 's/^export ROOTLESS_HOME=//p' "$rootless_dir/env")
  runuser -u "$rl_user" -- env -i HOME="$rl_home" USER="$rl_user" LANG=C.UTF-8 \
    PATH="$PWD/.venv/bin:/usr/bin:/bin" XDG_RUNTIME_DIR="$rootless_dir/run" \
    J2C_PODMAN_DIR="$rootless_dir" CI="${CI:-}" PYTHONDONTWRITEBYTECODE=1 \
    python -m pytest -q -p no:cacheprovider "${ROOTLESS_TESTS[@]}"
elif [[ $rootless -eq 2 && "${CI:-}" != true ]]; then
  echo "skipped: rootless podman cannot run here (the reason is above)"
else
  echo "the rootless podman leg cannot run (exit $rootless)" >&2
  exit 1
fi

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
