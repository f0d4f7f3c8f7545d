#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian, for the console's browser tests (tests/console/).
# Installs `chromium` and `chromium-driver` with apt-get when either is missing; a no-op otherwise.
set -euo pipefail
log() { printf '[browser] %s\n' "$*" >&2; }
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
log "installing chromium and chromium-driver (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
