"""One HTTP POST of a webhook to a checked Target: connected to the address that was checked (the Host header and
TLS name are the URL's host), never following a redirect, within one deadline for connect, send and the answer's
status line and headers (the body is not read), of which the connection has a shorter one of its own."""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
from typing import Any

from app.webhooks.destinations import Target

USER_AGENT = "Relay-Webhooks/1.0"


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to ADDRESS for HOST (no name resolution of its own), connected within CONNECT_S."""

    def __init__(self, host: str, port: int, address: str, timeout: float, connect_s: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address, self._connect_s = address, connect_s

    def connect(self) -> None:
        self.sock = _open(self._address, self.port, self._connect_s, self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """An HTTPS connection to ADDRESS, verifying the certificate of HOST (certifi's bundle, as upstream calls do)."""

    def __init__(self, host: str, port: int, address: str, timeout: float, connect_s: float) -> None:
        super().__init__(host, port, timeout=timeout, context=_tls_context())
        self._address, self._connect_s = address, connect_s

    def connect(self) -> None:
        raw = _open(self._address, self.port, self._connect_s, self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One context per process (loading the CA bundle takes milliseconds)."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def _open(address: str, port: int, connect_s: float, timeout: Any) -> socket.socket:
    """A socket connected within CONNECT_S (a destination that takes longer fails fast), then TIMEOUT per read."""
    sock = socket.create_connection((address, port), min(connect_s, timeout))
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers and body leave at once
    return sock


def post(target: Target, body: bytes, headers: dict[str, str], timeout: float,
         connect_s: float | None = None) -> tuple[int, str | None]:
    """POST BODY to TARGET; (status, Location header). Network errors raise OSError or http.client.HTTPException;
    the connection must be made within CONNECT_S (default TIMEOUT), and past TIMEOUT the socket is shut down,
    whatever the receiver does (a trickle of bytes included)."""
    kind = _PinnedTLS if target.scheme == "https" else _Pinned
    conn = kind(target.host, target.port, target.address, timeout, timeout if connect_s is None else connect_s)
    fired = threading.Event()
    watchdog = threading.Timer(timeout, _shut, [conn, fired])
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("POST", target.path, body=body, headers={
            "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
        response = conn.getresponse()
        return response.status, response.getheader("Location")
    except (OSError, http.client.HTTPException):
        if fired.is_set():
            raise TimeoutError(f"no answer within {timeout:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def _shut(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass
