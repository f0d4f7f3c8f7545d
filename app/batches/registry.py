"""This process's running batch items, so other threads can stop them (cancel listener, time-limit watchdog)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from uuid import UUID

from app.pipeline.interrupt import Interrupter

ItemKey = tuple[UUID, int]


@dataclass
class RunningItem:
    interrupter: Interrupter
    deadline: float  # time.monotonic() past which the item is stopped


class ItemRegistry:
    """Thread-safe map (batch_id, idx) → its Interrupter and deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[ItemKey, RunningItem] = {}

    def add(self, key: ItemKey, interrupter: Interrupter, deadline: float = float("inf")) -> bool:
        """Register KEY unless it is already running here (a duplicate message); True if added."""
        with self._lock:
            if key in self._items:
                return False
            self._items[key] = RunningItem(interrupter, deadline)
            return True

    def set_deadline(self, key: ItemKey, deadline: float) -> None:
        with self._lock:
            if key in self._items:
                self._items[key].deadline = deadline

    def remove(self, key: ItemKey) -> None:
        with self._lock:
            self._items.pop(key, None)

    def keys(self) -> list[ItemKey]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def interrupt(self, key: ItemKey, reason: str) -> bool:
        """Stop one item's upstream call; False when it does not run here."""
        with self._lock:
            item = self._items.get(key)
        if item is None:
            return False
        item.interrupter.interrupt(reason)
        return True

    def interrupt_batch(self, batch_id: UUID, reason: str) -> int:
        """Stop every local item of BATCH_ID; how many there were."""
        with self._lock:
            items = [item for (b, _), item in self._items.items() if b == batch_id]
        for item in items:
            item.interrupter.interrupt(reason)
        return len(items)

    def postpone(self, seconds: float) -> None:
        """Move every deadline SECONDS later: the process was paused that long (its items did not run meanwhile)."""
        with self._lock:
            for item in self._items.values():
                item.deadline += seconds

    def interrupt_overdue(self, now: float | None = None) -> int:
        """Stop every item past its deadline with reason "time_limit"; how many there were."""
        now = time.monotonic() if now is None else now
        with self._lock:
            items = [item for item in self._items.values() if item.deadline <= now and not item.interrupter.interrupted]
        for item in items:
            item.interrupter.interrupt("time_limit")
        return len(items)
