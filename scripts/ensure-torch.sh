#!/usr/bin/env bash
# Installs Debian's python3-torch (PyTorch 1.13, CPU, gloo) into the system Python when it lacks
# torch: the lab side of the real PyTorch tests (tests/cli/test_torch_e2e.py), whose venv is
# made over /usr/bin/python3 as a lab user's is over the hub's Python. The platform image gets
# the same package (scripts/platform-image.sh), so lab and image match and j2c ships no torch.
# When it cannot be installed here, the tests say why (and fail under CI=true).
set -euo pipefail
if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "ensure-torch: /usr/bin/python3 has no torch; install Debian's python3-torch as root" >&2
  exit 0
fi
echo "ensure-torch: installing Debian's python3-torch (a few minutes the first time)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends python3-torch >/dev/null 2>&1 || {
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torch >/dev/null
}
