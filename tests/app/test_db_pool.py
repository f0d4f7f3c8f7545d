"""The pool's reconnection policy rests on two psycopg_pool internals (app.db.RelayPool): an upgrade that renames
them must fail here rather than silently bring back the old backoff (tests/reliability/test_database_reconnects.py
proves the policy itself)."""

from __future__ import annotations

import inspect
import socket
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from app.db import RelayPool, create_pool
from devtools.services import ServiceUrls


@pytest.mark.parametrize(("name", "parameters"), [("_getconn_with_check_loop", ["self", "deadline"]),
                                                  ("_add_connection", ["self", "attempt", "growing"])])
def test_the_pool_internals_relay_overrides_still_exist_with_the_same_parameters(
        name: str, parameters: list[str]) -> None:
    assert getattr(RelayPool, name) is not getattr(ConnectionPool, name)
    assert list(inspect.signature(getattr(ConnectionPool, name)).parameters) == parameters


def _tcp_options(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """What the kernel holds for the connection's socket (a duplicate of it, closed after)."""
    sock = socket.fromfd(conn.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM)
    try:
        return {"keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)}
    finally:
        sock.close()


@pytest.mark.integration
def test_pooled_connections_probe_a_silent_server_unless_the_url_says_otherwise(services: ServiceUrls) -> None:
    # A server whose machine died answers nothing: the pool's sockets must give up in seconds, not TCP's 15 minutes.
    pool = create_pool(services.database_url, min_size=1, max_size=1)
    try:
        with pool.connection() as conn:
            assert _tcp_options(conn) == {"keepalive": 1, "idle": 5, "interval": 2, "count": 3,
                                          "user_timeout_ms": 10_000}
    finally:
        pool.close()
    own = services.database_url + ("&" if "?" in services.database_url else "?") + "keepalives_idle=30"
    pool = create_pool(own, min_size=1, max_size=1)
    try:
        with pool.connection() as conn:
            assert _tcp_options(conn)["idle"] == 30  # the URL's own choice wins
    finally:
        pool.close()
