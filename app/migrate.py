"""Apply the numbered SQL migrations in app/migrations, once each, safely from several replicas."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_LOCK_ID = 0x5E1A7  # advisory lock shared by every replica running migrations


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
    return applied_now
