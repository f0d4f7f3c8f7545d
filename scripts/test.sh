#!/usr/bin/env bash
# The test command: dependencies, local Postgres + RabbitMQ, lint, types, then the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k batches).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up >/dev/null
bash scripts/browser.sh  # headless Chromium + chromedriver from Debian, for tests/console
echo "== ruff"; .venv/bin/ruff check app actors adapters schemas devtools tests bench
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
# Under CI=true a missing service fails the run (tests/conftest.py); exit 5 (no tests ran) is a failure too.
CI="${CI:-true}" .venv/bin/pytest "$@"
