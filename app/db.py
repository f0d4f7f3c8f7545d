"""Postgres access: one connection pool per process, created after fork."""

from __future__ import annotations

import select
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from app.errors import ServiceUnavailable


def create_pool(database_url: str, min_size: int = 1, max_size: int = 10, name: str = "relay") -> ConnectionPool:
    """Open a pool of dict-row connections; fail fast with a clear error when Postgres is unreachable."""
    pool = ConnectionPool(
        database_url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": False},
        name=name,
        open=False,
        check=check_idle_connection,
    )
    try:
        pool.open(wait=True, timeout=10)
    except Exception as exc:  # psycopg_pool raises PoolTimeout wrapping the connect error
        pool.close()
        message = f"cannot connect to Postgres: {_reason(database_url)}"
        raise ServiceUnavailable("database_unavailable", message) from exc
    return pool


def check_idle_connection(conn: psycopg.Connection[Any]) -> None:
    """The pool's check at checkout: raise if the server dropped this idle connection (a restart, a terminated
    backend), so the pool replaces it before anyone uses it.

    An idle connection has nothing to read, and a server that drops it first sends a FATAL message or closes the
    socket: a zero-timeout poll sees that without a round trip. Anything readable gets the real round-trip check.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if _readable(conn.pgconn.socket):
        ConnectionPool.check_connection(conn)


@contextmanager
def autocommit(pool: ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection on which each statement commits by itself: single-statement work skips the BEGIN and
    COMMIT round trips (several statements that belong together still go in `conn.transaction()`)."""
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            if conn.info.transaction_status == pq.TransactionStatus.IDLE:
                conn.autocommit = False


Statement = tuple[str, Sequence[Any]]  # one data-modifying SQL statement (%s placeholders) and its parameters


def _readable(fd: int) -> bool:
    """Whether FD has input (or an error or hang-up) right now."""
    if hasattr(select, "poll"):  # gevent's monkey patching removes it; select() then cooperates
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


def check_database(database_url: str) -> None:
    """Connect once; raise ServiceUnavailable naming the problem without echoing credentials."""
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        message = f"cannot connect to Postgres at {_reason(database_url)}: {_first_line(exc)}"
        raise ServiceUnavailable("database_unavailable", message) from exc


def _reason(url: str) -> str:
    """The hosts, ports and database of URL (a multi-host URL names each host), without credentials."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unparsable RELAY_DATABASE_URL"
    hosts = str(params.get("host") or "localhost").split(",")
    ports = str(params.get("port") or "5432").split(",")
    ports += [ports[-1]] * (len(hosts) - len(ports))  # libpq: one port serves every host
    nodes = ",".join(f"{host}:{port or 5432}" for host, port in zip(hosts, ports, strict=False))
    return f"{nodes}/{params.get('dbname', '')}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
