"""Postgres access: one connection pool per process, created after fork."""

from __future__ import annotations

import psycopg
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
        check=ConnectionPool.check_connection,
    )
    try:
        pool.open(wait=True, timeout=10)
    except Exception as exc:  # psycopg_pool raises PoolTimeout wrapping the connect error
        pool.close()
        message = f"cannot connect to Postgres: {_reason(database_url)}"
        raise ServiceUnavailable("database_unavailable", message) from exc
    return pool


def check_database(database_url: str) -> None:
    """Connect once; raise ServiceUnavailable naming the problem without echoing credentials."""
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        message = f"cannot connect to Postgres at {_reason(database_url)}: {_first_line(exc)}"
        raise ServiceUnavailable("database_unavailable", message) from exc


def _reason(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 5432}{parts.path}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
