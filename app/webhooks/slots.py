"""Delivery slots per destination: a worker process makes at most RELAY_WEBHOOK_PER_DESTINATION attempts at once to
one destination (scheme, host, port), so a receiver that hangs or fails holds that many of the process's delivery
threads and no more; a delivery that finds its destination full is not claimed and comes back after BUSY_WAIT_S,
waiting on the broker, not on a thread."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

BUSY_WAIT_S = 1.0  # a delivery whose destination is full comes back after about this long (jittered)


def destination_of(url: str) -> str:
    """The destination a URL's deliveries share slots on: scheme, host and port (the path does not matter: one
    receiver behind several paths hangs them all)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def busy_wait() -> float:
    """How long a delivery whose destination is full waits (jittered, so a crowd of them does not come back at once)."""
    return BUSY_WAIT_S * random.uniform(0.75, 1.25)  # spreading retries, not a secret


class DestinationSlots:
    """Attempts in flight per destination in this process, each destination bounded by PER_DESTINATION."""

    def __init__(self, per_destination: int) -> None:
        self.per_destination = per_destination
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, url: str) -> Iterator[bool]:
        """A slot of URL's destination for the block (True), or False at once when all of them are taken."""
        key = destination_of(url)
        with self._lock:
            taken = self._held.get(key, 0) < self.per_destination
            if taken:
                self._held[key] = self._held.get(key, 0) + 1
        try:
            yield taken
        finally:
            if taken:
                with self._lock:
                    self._held[key] -= 1
                    if not self._held[key]:
                        del self._held[key]

    def in_flight(self, url: str) -> int:
        """Attempts to URL's destination running now."""
        with self._lock:
            return self._held.get(destination_of(url), 0)
