"""The one way catalog and credential changes are written: serialised, versioned, announced, then cached."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from app.catalog import store
from app.catalog.cache import refresh_after_write
from app.runtime import Runtime


@dataclass
class CatalogWrite:
    """A write in progress: set `changed` when something changed, `discard` to roll everything back."""

    conn: psycopg.Connection[Any]
    version: int
    changed: bool = False
    discard: bool = False


@contextmanager
def catalog_write(runtime: Runtime) -> Iterator[CatalogWrite]:
    """One transaction holding the catalog_version row lock; on a change, bump + NOTIFY in the same
    transaction, and after commit bring this replica's cache up to the new version before returning."""
    with runtime.pool.connection() as conn, conn.transaction():
        write = CatalogWrite(conn=conn, version=store.lock_version(conn))
        yield write
        if write.discard:
            raise psycopg.Rollback()
        if write.changed:
            write.version = store.bump_version(conn)
    if write.changed and not write.discard:
        refresh_after_write(runtime, write.version)
