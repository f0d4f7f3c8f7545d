#!/usr/bin/env bash
# Create .venv with the pinned development set (requirements-dev.txt: the runtime, the fake upstream, the test
# tools) and the `relay` command (no-op when already up to date).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: Python 3.11+ is required (found: $("$PY" --version 2>&1))" >&2; exit 1
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "[bootstrap] installing python3-venv (apt-get)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[bootstrap] installing Python dependencies into .venv" >&2
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
fi
