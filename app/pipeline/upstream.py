"""HTTP calls to upstream providers: one keep-alive connection per thread and upstream (http.client, headers and
body in one send, TCP_NODELAY, answers' headers split without the email parser: app/pipeline/http1.py), whose
sockets an Interrupter can shut down from another thread.

A thin client on purpose: a batch item or live call spends ~0.1 ms of CPU here instead of ~0.6 ms through
requests' sessions. No retries, no redirects, no environment proxies, no compression (`Accept-Encoding:
identity`); HTTPS verifies certificates against certifi's bundle, as requests does.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from app.blocking import os_poll
from app.pipeline import http1
from app.pipeline.interrupt import Interrupter

_local = threading.local()
READ_CHUNK = 64 * 1024


class UpstreamIOError(Exception):
    """The upstream could not be reached, timed out, or broke the connection."""


class UpstreamResponse:
    """An upstream answer whose body is read on demand; close() frees (or drops) its connection."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._response = response
        self.status_code = response.status
        self.headers = response.headers

    @property
    def content(self) -> bytes:
        """The whole body; UpstreamIOError if the connection breaks first."""
        try:
            return self._response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise UpstreamIOError(f"reading the answer failed: {exc!r}") from exc

    def iter_content(self) -> Iterator[bytes]:
        """The body as it arrives (each piece as soon as the socket has it)."""
        try:
            while chunk := self._response.read1(READ_CHUNK):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise UpstreamIOError(f"reading the answer failed: {exc!r}") from exc

    def close(self) -> None:
        """Keep the connection for the next call when the body was read to the end; drop it otherwise."""
        if not self._response.isclosed():
            self._drop()

    def _drop(self) -> None:
        self._response.close()
        self._conn.close()


@contextmanager
def interruptible(interrupter: Interrupter | None) -> Iterator[None]:
    """Within this block, upstream sockets used by this thread belong to INTERRUPTER."""
    previous = getattr(_local, "interrupter", None)
    _local.interrupter = interrupter
    try:
        yield
    finally:
        _local.interrupter = previous


def post(url: str, *, headers: dict[str, str], body: bytes, stream: bool,
         timeout: tuple[float, float]) -> UpstreamResponse:
    """POST BODY to URL on this thread's keep-alive connection; the answer with its body unread.

    TIMEOUT is (connect, read); the read timeout applies to each socket read. STREAM is accepted for symmetry
    with requests: bodies are always read on demand.
    """
    parts = urlsplit(url)
    slot = _slot(parts.scheme, parts.hostname or "", parts.port, timeout[0])
    conn = slot.conn
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        if conn.sock is None:
            conn.timeout = timeout[0]
            conn.connect()
        sock = conn.sock
        assert sock is not None
        _track(sock)
        sock.settimeout(timeout[1])
        conn.request("POST", path, body=body, headers=headers)
        slot.response = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise UpstreamIOError(f"POST {parts.scheme}://{parts.netloc}{parts.path} failed: {exc!r}") from exc
    return UpstreamResponse(conn, slot.response)


@dataclass
class _Slot:
    """A thread's connection to one upstream and the last answer read on it."""

    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse | None = None


def _slot(scheme: str, host: str, port: int | None, connect_timeout: float) -> _Slot:
    """This thread's connection to (SCHEME, HOST, PORT), ready for a request: reopened if the server closed it
    while idle, or if the last answer on it was left unread."""
    pool: dict[tuple[str, str, int | None], _Slot] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    key = (scheme, host, port)
    slot = pool.get(key)
    if slot is None:
        if scheme == "https":
            conn: http.client.HTTPConnection = http1.HTTPSConnection(
                host, port, timeout=connect_timeout, context=_tls_context())
        elif scheme == "http":
            conn = http1.Connection(host, port, timeout=connect_timeout)
        else:
            raise UpstreamIOError(f"unsupported URL scheme {scheme!r}")
        slot = pool[key] = _Slot(conn)
    elif (slot.response is not None and not slot.response.isclosed()) or (
            slot.conn.sock is not None and _dropped(slot.conn.sock)):
        slot.conn.close()
    slot.response = None
    return slot


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket that is readable was closed (or broken) by the server."""
    try:
        poll = os_poll()  # the OS's: gevent's poll(0) would switch to its hub and back (20 µs of CPU, not 1.3)
        if poll is not None:
            poller = poll()
            poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _track(sock: socket.socket) -> None:
    interrupter: Interrupter | None = getattr(_local, "interrupter", None)
    if interrupter is not None:
        interrupter.register(sock)


@cache
def _tls_context() -> ssl.SSLContext:
    import certifi

    return ssl.create_default_context(cafile=certifi.where())
