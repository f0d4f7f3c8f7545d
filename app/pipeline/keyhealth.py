"""KeyHealthCache: the breaker state of host keys (key_health), held per process so a call reads no table.

Shared by every replica through Postgres: a trigger NOTIFYs `relay_key_health` with the key's id whenever its failure
count or open period changes (migration 0012), and every process's listener drops that key's entry; the next call
reads it again. A listener that reconnects drops everything (notifications sent meanwhile are lost). What changes
without a notification, the last-use time of least-recently-used selection, is re-read when an entry is older than
MAX_AGE_S; a process's own uses count at once (the usage writer commits them a few milliseconds later).
Failures, a closing breaker and a probe claim are written to Postgres during the call (app/pipeline/record.py,
calls.py), and the writing process drops its own entry at once, so its next call reads them too.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg import Notify
from psycopg_pool import ConnectionPool

from app.db import autocommit
from app.notify import NotifyListener
from app.pipeline.keypool import KeyHealth, load_health
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("relay.keyhealth")
SERVICE_NAME = "key_health"
CHANNEL = "relay_key_health"
LISTENER_NAME = "relay-key-health-listener"
MAX_AGE_S = 1.0


class KeyHealthCache:
    """Key id → KeyHealth with the time it was read; one per process (see get_key_health)."""

    def __init__(self, settings: Settings, pool: ConnectionPool, *, listen: bool = True) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._entries: dict[UUID, tuple[KeyHealth, float]] = {}
        self._generation = 0  # moves on every invalidation: a read begun before must not be kept
        self._used: dict[UUID, datetime] = {}  # this process's own last uses (see note_use)
        self.reads = 0  # how many times key_health was queried (for tests)
        self._listener: NotifyListener | None = None
        if listen:
            self._listener = NotifyListener(settings.database_url, [CHANNEL], name=LISTENER_NAME,
                                            interval=settings.cache_poll_interval_s,
                                            on_connect=lambda _conn: self.invalidate(), on_wake=self._on_wake).start()

    def health(self, ids: list[UUID]) -> dict[UUID, KeyHealth]:
        """The state of every key in IDS (a key without a row is healthy); reads only missing or old entries."""
        started = time.monotonic()
        found: dict[UUID, KeyHealth] = {}
        with self._lock:
            for key_id in ids:
                entry = self._entries.get(key_id)
                if entry is not None and started - entry[1] < MAX_AGE_S:
                    found[key_id] = entry[0]
            generation = self._generation
        missing = [key_id for key_id in ids if key_id not in found]
        if missing:
            with autocommit(self._pool) as conn:
                rows = load_health(conn, missing)
            self.reads += 1
            fresh = {key_id: rows.get(key_id, KeyHealth()) for key_id in missing}
            with self._lock:
                if self._generation == generation:
                    self._entries.update((key_id, (h, started)) for key_id, h in fresh.items())
            found.update(fresh)
        return self._with_own_uses(found)

    def _with_own_uses(self, found: dict[UUID, KeyHealth]) -> dict[UUID, KeyHealth]:
        with self._lock:
            used = {key_id: self._used[key_id] for key_id in found if key_id in self._used}
        for key_id, at in used.items():
            if found[key_id].last_used_at is None or found[key_id].last_used_at < at:  # type: ignore[operator]
                found[key_id] = replace(found[key_id], last_used_at=at)
        return found

    def invalidate(self, key_id: UUID | None = None) -> None:
        """Forget KEY_ID's state (every key's when None): the next call reads it again."""
        with self._lock:
            self._generation += 1
            if key_id is None:
                self._entries.clear()
            else:
                self._entries.pop(key_id, None)

    def note_use(self, key_id: UUID) -> None:
        """This process just used KEY_ID (least-recently-used selection): its last use is now, whatever a read that
        began before the usage writer committed it says."""
        with self._lock:
            self._used[key_id] = datetime.now(UTC)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def _on_wake(self, _conn: Any, notes: list[Notify]) -> None:
        for payload in (note.payload for note in notes):
            try:
                self.invalidate(UUID(payload) if payload else None)
            except ValueError:
                log.warning("key health listener: ignored payload %r", payload[:80])


def get_key_health(runtime: Runtime) -> KeyHealthCache:
    """This process's KeyHealthCache, created (and its listener started) on first use."""
    return runtime.service(SERVICE_NAME, lambda: KeyHealthCache(runtime.settings, runtime.pool))
