"""The pool's reconnection policy rests on two psycopg_pool internals (app.db.RelayPool): an upgrade that renames
them must fail here rather than silently bring back the old backoff (tests/reliability/test_database_reconnects.py
proves the policy itself)."""

from __future__ import annotations

import inspect

import pytest
from psycopg_pool import ConnectionPool

from app.db import RelayPool


@pytest.mark.parametrize(("name", "parameters"), [("_getconn_with_check_loop", ["self", "deadline"]),
                                                  ("_add_connection", ["self", "attempt", "growing"])])
def test_the_pool_internals_relay_overrides_still_exist_with_the_same_parameters(
        name: str, parameters: list[str]) -> None:
    assert getattr(RelayPool, name) is not getattr(ConnectionPool, name)
    assert list(inspect.signature(getattr(ConnectionPool, name)).parameters) == parameters
