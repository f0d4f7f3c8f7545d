"""Interrupting a blocked upstream call from another thread (cancel, item time limit).

A thread blocked in recv() ignores Python async exceptions; shutting the socket down wakes it at once.
"""

from __future__ import annotations

import socket
import threading


class Interrupted(Exception):
    """The call was interrupted on purpose; `reason` says why (cancelled, time_limit)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Interrupter:
    """Holds the sockets of one in-flight call; interrupt() shuts them down from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.reason: str | None = None
        self._released = False
        self._stopped = threading.Event()

    @property
    def interrupted(self) -> bool:
        return self.reason is not None

    def check(self) -> None:
        """Raise Interrupted if interrupt() was called."""
        if self.reason is not None:
            raise Interrupted(self.reason)

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            if self._released:
                return
            if self.reason is not None:
                _shutdown(sock)
            self._sockets.add(sock)

    def unregister(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def release(self) -> None:
        """The call is over: forget its sockets (they go back to the pool and serve other calls)."""
        with self._lock:
            self._sockets.clear()
            self._released = True

    def rearm(self) -> None:
        """The same item calls again (its first call failed before reaching the upstream): interruptible again."""
        with self._lock:
            self._released = False

    def wait(self, seconds: float) -> bool:
        """Sleep up to SECONDS, waking early (True) if the call is interrupted meanwhile."""
        return self._stopped.wait(seconds)

    def interrupt(self, reason: str) -> None:
        with self._lock:
            if self.reason is None and not self._released:
                self.reason = reason
                self._stopped.set()
            for sock in self._sockets:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass
