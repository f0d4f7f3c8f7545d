"""CatalogCache: the snapshot every request reads, reloaded within ~1 s of a change made on any replica.

A background thread (app.notify) LISTENs on `relay_catalog` over a dedicated autocommit connection and, every
`cache_poll_interval_s` (or at once on a notification), compares `catalog_version` with the snapshot's;
when they differ it reloads the whole snapshot. The poll covers lost notifications and reconnects.
Reading a snapshot costs no database round trip.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from app.access.snapshot import CatalogSnapshot, CredentialRows, build_snapshot
from app.catalog import store
from app.catalog.model import Policy
from app.catalog.secrets import SecretBox
from app.catalog.writes import CACHE_SERVICE
from app.credentials import store as credential_store
from app.notify import NotifyListener
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("relay.catalog")
LISTENER_NAME = "relay-catalog-listener"  # application_name of the LISTEN connection


def load_snapshot(conn: psycopg.Connection[Any], box: SecretBox) -> CatalogSnapshot:
    """Read the catalog and credentials in one consistent transaction and build a snapshot."""
    with conn.transaction():
        store.begin_consistent_read(conn)
        rows = store.load_catalog_rows(conn)
        creds = CredentialRows(relay_keys=credential_store.load_relay_keys(conn),
                               key_values=credential_store.load_key_values(conn),
                               tokens=credential_store.load_recent_tokens(conn))
    return build_snapshot(rows, creds, box)


class CatalogCache:
    """Holds the current CatalogSnapshot; one per process (see get_catalog)."""

    def __init__(self, settings: Settings, pool: ConnectionPool, *, listen: bool = True) -> None:
        self._settings = settings
        self._pool = pool
        self._box = SecretBox(settings.secret_key)
        self._reload_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._last_check_started = 0.0
        self.reloads = 0  # how many snapshots were loaded (for tests and metrics)
        self.version_checks = 0  # how many version reads were made
        with pool.connection() as conn:
            self._snapshot = load_snapshot(conn, self._box)
        self._listener: NotifyListener | None = None
        if listen:
            self._listener = NotifyListener(settings.database_url, [store.NOTIFY_CHANNEL], name=LISTENER_NAME,
                                            interval=settings.cache_poll_interval_s, on_connect=self._catch_up,
                                            on_wake=lambda conn, _notes: self._catch_up(conn)).start()

    def snapshot(self) -> CatalogSnapshot:
        """The current snapshot (no I/O)."""
        return self._snapshot

    def refresh_now(self) -> CatalogSnapshot:
        """Reload the snapshot from the database now, whatever the version."""
        with self._pool.connection() as conn:
            return self._reload(conn, force=True)

    def ensure_fresh(self) -> CatalogSnapshot:
        """Read the version (one cheap query) and reload when the snapshot is behind it.

        Concurrent callers share one check: a caller waiting for the lock reuses a check that began after it
        arrived, so a flood of unknown credentials costs at most one query at a time.
        """
        arrived = time.monotonic()
        with self._check_lock:
            if self._last_check_started > arrived:
                return self._snapshot
            self._last_check_started = time.monotonic()
            with self._pool.connection() as conn:
                return self._catch_up(conn)

    def check_for_changes(self) -> CatalogSnapshot:
        """ensure_fresh for the hot path's misses: when the database cannot be reached, the current snapshot."""
        try:
            return self.ensure_fresh()
        except Exception as exc:  # an unreachable database must not turn a 401 into a 500
            log.warning("catalog version check failed: %s", type(exc).__name__)
            return self._snapshot

    def ensure_version(self, version: int) -> CatalogSnapshot:
        """Make sure the snapshot is at least VERSION (after a write on this replica)."""
        if self._snapshot.version >= version:
            return self._snapshot
        return self.ensure_fresh()

    def close(self) -> None:
        """Stop the listener thread."""
        if self._listener is not None:
            self._listener.close()

    def _catch_up(self, conn: psycopg.Connection[Any]) -> CatalogSnapshot:
        self.version_checks += 1
        if conn.autocommit:  # the listener's connection: one statement, without BEGIN and COMMIT round trips
            version = store.read_version(conn)
        else:  # a pool connection: the read ends its transaction, so that a reload can begin its own
            with conn.transaction():
                version = store.read_version(conn)
        if version != self._snapshot.version:
            # A lower version than ours means the database was restored: take it as it is.
            return self._reload(conn, force=version < self._snapshot.version, seen=version)
        return self._snapshot

    def _reload(self, conn: psycopg.Connection[Any], *, force: bool, seen: int | None = None) -> CatalogSnapshot:
        with self._reload_lock:
            if seen is not None and not force and self._snapshot.version >= seen:
                return self._snapshot  # another thread loaded it while this one waited
            fresh = load_snapshot(conn, self._box)
            self.reloads += 1
            # Never go back to an older version another thread has already installed, unless forced.
            if force or fresh.version >= self._snapshot.version:
                self._snapshot = fresh
            return self._snapshot


def get_catalog(runtime: Runtime) -> CatalogCache:
    """This process's CatalogCache, created (and its listener started) on first use."""
    return runtime.service(CACHE_SERVICE, lambda: CatalogCache(runtime.settings, runtime.pool))


def get_policy(runtime: Runtime, policy_id: UUID) -> Policy | None:
    """The policy with POLICY_ID from the cache; None when it is unknown or deleted (disabled ones are returned)."""
    policy = get_catalog(runtime).snapshot().policy(policy_id)
    return None if policy is None or policy.deleted else policy
