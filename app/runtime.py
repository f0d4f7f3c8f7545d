"""The per-process runtime: settings plus the shared resources every service needs."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool

from app.db import create_pool
from app.redaction import register_secrets
from app.settings import Settings

T = TypeVar("T")


@dataclass
class Runtime:
    """What a process (API worker or Dramatiq worker) holds: built once, passed down explicitly."""

    settings: Settings
    pool: ConnectionPool
    services: dict[str, Any] = field(default_factory=dict)
    _services_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(cls, settings: Settings, *, pool_max: int | None = None) -> Runtime:
        register_secrets([settings.admin_token, settings.secret_key])  # never in a log line of this process
        pool = create_pool(settings.database_url, min_size=settings.db_pool_min,
                           max_size=pool_max or settings.db_pool_max)
        return cls(settings=settings, pool=pool)

    def service(self, name: str, create: Callable[[], T]) -> T:
        """This process's NAME service (a cache, a writer), made by CREATE on first use, once whatever the threads."""
        found = self.services.get(name)
        if found is None:
            with self._services_lock:
                found = self.services.get(name)
                if found is None:
                    found = self.services[name] = create()
        return found  # type: ignore[no-any-return]

    def close(self) -> None:
        for service in self.services.values():
            close = getattr(service, "close", None)
            if callable(close):
                close()
        self.pool.close()


def freeze_boot_heap() -> int:
    """Collect once, then move every object the process built at boot (the app, the catalog, imported modules)
    into the collector's permanent generation: a full collection then scans only what requests made since. In the
    API's process a full collection of its ~114,000 boot objects took 44 ms, time a request waits for; after this,
    0.002 ms. How many objects it froze."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
