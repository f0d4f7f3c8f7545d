"""A server process's connection slots, kept from being taken by idle connections (app/api/server.py).

A gevent worker holds at most `--connections` connections; once they are all open it stops accepting, and every
new caller waits in the listen backlog. Connections without a request in progress (before their first request,
or kept alive between requests) cost their holder nothing, so one client holding ~2,000 of them delayed everyone
else until the header deadline dropped them. Two rules keep room:
- one address holds at most `per_address` of a process's connections (more are answered 503 and closed);
- once the slots run out, the connection idle the longest is closed (shut down: its greenlet sees the end of the
  stream and exits quietly) to make room for the next, so a new caller waits for no idle one. A request in
  progress is never closed for room.

All of it runs on the worker's gevent hub (one OS thread, no switch between these calls): no lock.
"""

from __future__ import annotations

import socket
from collections import Counter, OrderedDict


class TooManyConnections(Exception):
    """A new connection from an address that already holds its share of the process's connections."""


class ConnectionSlots:
    """The open connections of one server process: per address, and those idle, oldest first."""

    def __init__(self, slots: int, per_address: int) -> None:
        self.slots = slots
        self.per_address = per_address  # 0: no cap
        self._by_address: Counter[str] = Counter()
        self._idle: OrderedDict[socket.socket, None] = OrderedDict()
        self._open = 0
        self._closing: set[socket.socket] = set()  # shut down for room, not yet released
        self.shed = 0  # how many idle connections were closed for room (for tests and logs)

    def admit(self, sock: socket.socket, address: str) -> None:
        """Count a new connection (idle until its first request); TooManyConnections past the address's cap (none
        for a connection without an address, on a Unix socket)."""
        if self.per_address and address and self._by_address[address] >= self.per_address:
            raise TooManyConnections(address)
        self._by_address[address] += 1
        self._open += 1
        self._make_room()
        self._idle[sock] = None

    def busy(self, sock: socket.socket) -> None:
        """SOCK's request is being handled: never closed for room meanwhile."""
        self._idle.pop(sock, None)

    def idle(self, sock: socket.socket) -> None:
        """SOCK's request was answered: it waits for the next one (the newest idle connection)."""
        if sock not in self._closing:
            self._idle[sock] = None

    def release(self, sock: socket.socket, address: str) -> None:
        """SOCK is closed."""
        self._idle.pop(sock, None)
        self._closing.discard(sock)
        self._open -= 1
        self._by_address[address] -= 1
        if self._by_address[address] <= 0:
            del self._by_address[address]

    def close_idle(self) -> int:
        """Shut down every idle connection (a graceful stop: a request in progress is answered, then closed by the
        server as it is no longer alive); how many."""
        closed = 0
        while self._idle:
            sock, _ = self._idle.popitem(last=False)
            self._closing.add(sock)
            closed += 1
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return closed

    def _make_room(self) -> None:
        """Close the oldest idle connections while the slots are all taken, so the server keeps accepting."""
        while self._open - len(self._closing) >= self.slots and self._idle:
            oldest, _ = self._idle.popitem(last=False)
            self._closing.add(oldest)
            self.shed += 1
            try:
                oldest.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
