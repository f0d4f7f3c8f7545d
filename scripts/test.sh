#!/usr/bin/env bash
# The test command: dependencies, local Postgres + RabbitMQ, lint, types, then the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k batches).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/prepare.sh --browser  # .venv, Postgres + RabbitMQ, headless Chromium for tests/console
echo "== ruff"; .venv/bin/ruff check app actors adapters schemas devtools tests bench
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
# The tiers (tests/tiers.py): CI=true runs them all; a local run deselects `slow` (faults, the cluster, the console,
# fuzzing, the bench's smoke tests). Arguments come last, so `-m ...` or `-n ...` of the caller win.
TIERS=(-m "not slow")
[[ "${CI:-}" == true ]] && TIERS=()
# In parallel (pytest-xdist): RELAY_TEST_WORKERS processes, each on a database and vhost of its own
# (<RELAY_TEST_DB>_gw0, ...); one group per test file, so a module's processes start once.
# Under CI=true for pytest a missing service fails the run (tests/conftest.py); exit 5 (no tests ran) is a failure.
CI=true .venv/bin/pytest -n "${RELAY_TEST_WORKERS:-4}" --dist loadgroup "${TIERS[@]}" "$@"
