"""The one way catalog and credential changes are written: serialised, versioned, announced, then cached.

The catalog knows nothing of the credentials or of the cache built from both (app.access): a write brings this
process's cache up to date through the runtime's service slot CACHE_SERVICE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from app.catalog import store
from app.runtime import Runtime

CACHE_SERVICE = "catalog"  # the runtime service holding this process's catalog cache, if it has one


class VersionedCache(Protocol):
    def ensure_version(self, version: int) -> None:
        """Return once the cache holds VERSION or newer."""


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
        cache: VersionedCache | None = runtime.services.get(CACHE_SERVICE)
        if cache is not None:  # answer only once this replica serves what was just written
            cache.ensure_version(write.version)
