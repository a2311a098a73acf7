#!/usr/bin/env bash
# Installs Debian's Chromium for the Galata UI tests when no Chromium is on the machine
# (Playwright cannot download its own browser builds here).
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" != 0 ]; then
  echo "ensure-chromium: no Chromium found; install Debian's 'chromium' package as root" >&2
  exit 1
fi
echo "ensure-chromium: installing Debian's chromium"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
