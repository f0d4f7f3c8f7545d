"""Apply the numbered SQL migrations in app/migrations, once each, safely from several replicas."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from adapters.registry import ShapeRegistrationError, batch_shapes

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_LOCK_ID = 0x5E1A7  # advisory lock shared by every replica running migrations
SHAPE_COLUMNS = (("batches", "shape"), ("bindings", "adapter"))  # the columns whose CHECK lists the batch shapes


def list_migrations() -> list[tuple[int, Path]]:
    """The migration files in order, as (version, path)."""
    found = []
    for path in MIGRATIONS_DIR.glob("*.sql"):
        match = re.match(r"(\d+)_", path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def apply_migrations(database_url: str) -> list[int]:
    """Apply pending migrations under an advisory lock; return the versions applied now."""
    applied_now = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for version, path in list_migrations():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(path.read_text())  # type: ignore[arg-type]  # trusted file shipped with Relay
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                applied_now.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
        check_shapes(conn)
    return applied_now


def pending_migrations(database_url: str) -> list[int]:
    """The versions of the migrations this code has and the database has not applied yet."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        done: set[int] = set()
        if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() != (None,):
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    return [version for version, _ in list_migrations() if version not in done]


def check_shapes(conn: psycopg.Connection[Any]) -> None:
    """ShapeRegistrationError unless the shapes the database accepts are the registered batch shapes: a shape
    with no adapter, or an adapter whose shape no migration lets the database store, stops the process at start
    (rather than a 500 at its first submit)."""
    registered = set(batch_shapes())
    for table, column in SHAPE_COLUMNS:
        accepted = accepted_values(conn, table, column)
        if accepted != registered:
            raise ShapeRegistrationError(
                f"{table}.{column} accepts {sorted(accepted)} but the registered shapes are {sorted(registered)}:"
                " each shape needs its adapter in adapters/registry.py and a migration adding it to that CHECK")


def accepted_values(conn: psycopg.Connection[Any], table: str, column: str) -> set[str]:
    """The text values the CHECK constraint on TABLE.COLUMN lists (`column IN ('a', 'b')`)."""
    rows = conn.execute(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid"
        " AND a.attnum = ANY (c.conkey) WHERE c.conrelid = %s::regclass AND c.contype = 'c' AND a.attname = %s",
        (table, column)).fetchall()
    return {value for (definition,) in rows for value in re.findall(r"'([^']*)'::text", definition)}
