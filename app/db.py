"""Postgres access: one connection pool per process, created after fork."""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from app.errors import DatabaseUnavailable

CONNECT_TIMEOUT_S = 5  # a connection attempt to a host that does not answer (a partition), unless the URL says
# A server whose machine dies sends no reset: a statement awaiting its answer would wait for TCP to give up (about
# 15 minutes on Linux), a pooled idle connection would look alive. Probes after 5 s idle, 2 s apart, 3 unanswered
# (11 s), and sent data unacknowledged for 10 s, end such a connection about when an HA manager's failover has
# promoted a standby (pg_auto_failover as scripts/cluster.sh runs it: about 10 s; Patroni: at least 20 s), unless
# the URL says otherwise. libpq's names; the server's tcp_keepalives_* are the other side.
TCP_DEAD_PEER = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
                 "tcp_user_timeout": 10_000}
RECONNECT_MAX_DELAY_S = 0.5  # the longest wait between two attempts to replace a lost connection
# Errors that mean the connection ended, not the work: the database away (OperationalError), or a transaction the
# server ended because its process stopped inside it (idle_in_transaction_session_timeout, which psycopg maps to an
# InternalError). Work that retries through an outage retries through these.
CONNECTION_ENDED: tuple[type[psycopg.Error], ...] = (psycopg.OperationalError,
                                                     psycopg.errors.IdleInTransactionSessionTimeout)
CONNECT_ERROR_LOG_EVERY_S = 10.0  # psycopg_pool logs every failed attempt: one line per this long is enough


class PromptAttempt(AttemptWithBackoff):
    """psycopg_pool's reconnection backoff (1, 2, 4, 8, 16 s... between attempts) capped at RECONNECT_MAX_DELAY_S and
    starting lower: after a 30 s outage its next attempt came up to 30 s after Postgres was back."""

    INITIAL_DELAY = 0.1

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY_S)


class RelayPool(ConnectionPool[psycopg.Connection[Any]]):
    """psycopg_pool's pool, recovering within a second of Postgres being back after it dropped the connections (a
    restart, a failover, terminated sessions).

    psycopg_pool's own policy rejected one dead connection per checkout check and slept 1, 2, 4, 8 s between
    rejections, so a request met each dead connection of the pool in turn and timed out after 30 s; and it backed
    off up to minutes between reconnection attempts. Here the first dead connection a checkout meets makes the pool
    check all its idle ones at once (dead ones are replaced), the checkout waits only when fresh connections fail
    too, and reconnection attempts are at most RECONNECT_MAX_DELAY_S apart. The two methods overridden are
    psycopg_pool's (3.3) internals; tests/app/test_db.py fails if they are renamed.
    """

    def _getconn_with_check_loop(self, deadline: float) -> psycopg.Connection[Any]:
        attempt: PromptAttempt | None = None
        swept = False
        while True:
            conn = self._getconn_unchecked(deadline - time.monotonic())
            try:
                self._check_connection(conn)
            except Exception:
                self._putconn(conn, from_getconn=True)
            except BaseException:  # cancelled: keep the connection, try no more
                self._putconn(conn, from_getconn=True)
                raise
            else:
                return conn
            if not swept:  # a restart drops every connection: find the dead ones now, not one per request
                swept = True
                self.check()
                continue
            now = time.monotonic()
            if attempt is None:
                attempt = PromptAttempt(timeout=deadline - now)
            attempt.update_delay(now)
            if attempt.time_to_give_up(now):
                raise PoolTimeout()
            time.sleep(attempt.delay)

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or PromptAttempt(timeout=self.reconnect_timeout), growing)


def create_pool(database_url: str, min_size: int = 1, max_size: int = 10, name: str = "relay") -> ConnectionPool:
    """Open a pool of dict-row connections; fail fast with a clear error when Postgres is unreachable."""
    _throttle_connect_errors()
    kwargs: dict[str, Any] = {"row_factory": dict_row, "autocommit": False, **connect_defaults(database_url)}
    pool = RelayPool(database_url, min_size=min_size, max_size=max_size, kwargs=kwargs, name=name, open=False,
                     check=check_idle_connection)
    try:
        pool.open(wait=True, timeout=10)
    except Exception as exc:  # psycopg_pool raises PoolTimeout wrapping the connect error
        pool.close()
        message = f"cannot connect to Postgres: {_reason(database_url)}"
        raise DatabaseUnavailable(message=message) from exc
    return pool


def connect_defaults(database_url: str) -> dict[str, Any]:
    """The connection parameters Relay adds to DATABASE_URL's when it names none of them: CONNECT_TIMEOUT_S, and
    TCP_DEAD_PEER so a connection to a server whose machine died ends in seconds."""
    given = conninfo_to_dict(database_url)
    wanted = {"connect_timeout": CONNECT_TIMEOUT_S, **TCP_DEAD_PEER}
    return {name: value for name, value in wanted.items() if name not in given}


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
def autocommit(pool: ConnectionPool, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection (waiting up to TIMEOUT, the pool's own by default) on which each statement commits by
    itself: single-statement work skips the BEGIN and COMMIT round trips (several statements that belong together
    still go in `conn.transaction()`)."""
    with pool.connection(timeout=timeout) as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            if conn.info.transaction_status == pq.TransactionStatus.IDLE:
                conn.autocommit = False


# Sessions whose snapshot or transaction began before transaction id %s: while one runs, a page deleted before that
# id is not yet reusable. Every database's count: PostgreSQL 15 judges a B-tree page against the whole cluster's.
_OLDER_SNAPSHOTS = ("SELECT count(*) AS v FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                    " AND age(coalesce(backend_xmin, backend_xid)) >= age(%s::xid)")
SNAPSHOTS_WAIT_S = 30.0  # how long the second pass waits for them, at most


def vacuum_for_reuse(pool: ConnectionPool, tables: Sequence[str]) -> None:
    """VACUUM TABLES (constant names) after a purge deleted many of their rows, so that the next writes reuse the
    space instead of growing the files. Twice: an index page the first pass empties is recorded as free only by a
    later pass, and only once no session could still see it (PostgreSQL's B-tree page recycling). So between the
    two, a transaction takes an id, and the second pass waits (up to SNAPSHOTS_WAIT_S) until every snapshot and
    transaction older than that id has ended, in any database: one statement still running from before left the
    pages for the vacuum after. A plain VACUUM takes no lock that stops reads or
    writes. Autovacuum would come to it too, but only once a fifth of a table is dead by default, which a daily
    purge of a month's window never is."""
    with autocommit(pool) as conn:
        conn.execute(f"VACUUM {', '.join(tables)}")
        xid = _one(conn, "SELECT pg_current_xact_id()::xid::text AS v", ())
        deadline = time.monotonic() + SNAPSHOTS_WAIT_S
        while _one(conn, _OLDER_SNAPSHOTS, (xid,)) and time.monotonic() < deadline:
            time.sleep(0.05)
        conn.execute(f"VACUUM {', '.join(tables)}")


def _one(conn: psycopg.Connection[Any], query: str, params: Sequence[Any]) -> Any:
    """The one value (column `v`) QUERY answers."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row["v"]


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
        raise DatabaseUnavailable(message=message) from exc


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


class _ConnectErrorThrottle(logging.Filter):
    """Lets through one of psycopg_pool's "error connecting" lines per CONNECT_ERROR_LOG_EVERY_S: with attempts
    half a second apart per lost connection, an outage would otherwise log dozens of lines a second."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -CONNECT_ERROR_LOG_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("error connecting in"):
            return True
        now = time.monotonic()
        if now - self._last < CONNECT_ERROR_LOG_EVERY_S:
            return False
        self._last = now
        return True


def _throttle_connect_errors() -> None:
    logger = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, _ConnectErrorThrottle) for f in logger.filters):
        logger.addFilter(_ConnectErrorThrottle())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
