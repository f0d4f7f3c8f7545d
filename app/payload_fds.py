"""A cache of open read descriptors of the folder store's files (app/payloads.py): kept open for the next read,
closed beyond a capacity once no thread reads through them."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from app.payload_files import close_quietly


class _Handle:
    def __init__(self, fd: int, info: Any) -> None:
        self.fd, self.info = fd, info
        self.users = 0
        self.retired = False


FileKey = tuple[Any, str]  # (batch id, file name)
T = TypeVar("T")


def _nothing(fd: int) -> None:
    return None


class OpenFiles:
    """Read-only descriptors by (batch id, file name), kept open for the next read; the least recently used are
    closed beyond CAPACITY, each only once no thread is reading through it (its number could be reused)."""

    def __init__(self, capacity: int, path_of: Callable[[FileKey], str]) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[FileKey, _Handle] = OrderedDict()
        self._capacity, self._path_of = capacity, path_of

    def read(self, key: FileKey, reader: Callable[[int, Any], T], describe: Callable[[int], Any] = _nothing) -> T:
        """READER(fd, DESCRIBE(fd)) on KEY's file, opened on first use; OSError when it cannot be opened."""
        handle = self._acquire(key, describe)
        try:
            return reader(handle.fd, handle.info)
        finally:
            with self._lock:
                handle.users -= 1
                close = handle.retired and handle.users == 0
            if close:
                close_quietly(handle.fd)

    def drop(self, batch_id: Any, name: str | None = None) -> None:
        """Close the descriptors of a batch's files (or of one of them), once their readers are done."""
        with self._lock:
            for key in [k for k in self._open if k[0] == batch_id and name in (None, k[1])]:
                self._retire(self._open.pop(key))

    def close(self) -> None:
        with self._lock:
            while self._open:
                self._retire(self._open.popitem()[1])

    def _acquire(self, key: FileKey, describe: Callable[[int], Any]) -> _Handle:
        with self._lock:
            handle = self._open.get(key)
            if handle is not None:
                self._open.move_to_end(key)
                handle.users += 1
                return handle
        fd = os.open(self._path_of(key), os.O_RDONLY | os.O_CLOEXEC)
        try:
            fresh = _Handle(fd, describe(fd))
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            handle = self._open.setdefault(key, fresh)
            handle.users += 1
            while len(self._open) > self._capacity:
                self._retire(self._open.popitem(last=False)[1])
        if handle is not fresh:
            os.close(fd)
        return handle

    def _retire(self, handle: _Handle) -> None:
        """Called under the lock."""
        handle.retired = True
        if handle.users == 0:
            close_quietly(handle.fd)
