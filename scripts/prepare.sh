#!/usr/bin/env bash
# What scripts/dev.sh up and scripts/test.sh need first: the virtualenv (scripts/bootstrap.sh) and the local
# Postgres and RabbitMQ (scripts/services.sh up), and with --browser the headless Chromium (scripts/browser.sh).
# The services start (and, on a fresh machine, install with apt-get) while pip installs the Python dependencies,
# when bootstrap.sh has no apt-get of its own to run (Python with venv and ensurepip): two apt-gets at once would
# fight over dpkg's lock, so then one goes after the other.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
services() {
  bash scripts/services.sh up >/dev/null
  if [ "${1:-}" = --browser ]; then bash scripts/browser.sh; fi
}
if "${PYTHON:-python3}" -c 'import venv, ensurepip' 2>/dev/null; then
  services "$@" &
  beside=$!
  bash scripts/bootstrap.sh || { wait "$beside" || true; exit 1; }
  wait "$beside"
else
  bash scripts/bootstrap.sh
  services "$@"
fi
