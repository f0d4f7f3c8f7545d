"""The publisher port: what the dispatcher needs from the item queue, in verbs no queue library shows through.

The dispatcher decides what to publish and when (window, fair share, pacing: `dispatch.py`, `scheduler.py`); a
publisher only carries its messages to the workers. The worker process builds one (`actors/publisher.py`: Dramatiq
messages on RabbitMQ through pika) and hands it to its dispatcher; tests hand it an `InProcessPublisher`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from app.batches.scheduler import Publication


class Publisher(Protocol):
    """The item queue as the dispatcher sees it. Methods raise (any exception) when the queue cannot be reached;
    the dispatcher then closes the publisher and tries again with a backoff."""

    def publish(self, messages: Sequence[Publication]) -> None:
        """Publish MESSAGES durably, all or none, each carrying its trace context (`Publication.trace`) to the
        item actor."""

    def depth(self) -> int:
        """Messages waiting in the item queue now (not yet taken by a worker)."""

    def idle(self) -> None:
        """Between the dispatcher's passes: answer what the connection needs answered (e.g. heartbeats)."""

    def close(self) -> None:
        """Drop the connection; the next call opens a new one."""


class InProcessPublisher:
    """A publisher without a broker (tests, an in-process engine): every message is recorded in `published`, then
    handed to DELIVER when one is given (run it, queue it on a thread pool), else kept in `waiting` until `take()`."""

    def __init__(self, deliver: Callable[[Publication], object] | None = None) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()
        self.published: list[Publication] = []
        self.waiting: list[Publication] = []
        self.closed = 0  # how many times the dispatcher dropped the connection

    def publish(self, messages: Sequence[Publication]) -> None:
        with self._lock:
            self.published.extend(messages)
            if self._deliver is None:
                self.waiting.extend(messages)
        if self._deliver is not None:
            for message in messages:
                self._deliver(message)

    def depth(self) -> int:
        with self._lock:
            return len(self.waiting)

    def take(self) -> list[Publication]:
        """The messages waiting, as a worker would consume them (the queue is empty after)."""
        with self._lock:
            taken, self.waiting = self.waiting, []
        return taken

    def idle(self) -> None:
        """Nothing to keep alive."""

    def close(self) -> None:
        self.closed += 1
