"""HTTP calls to upstream providers: pooled keep-alive sessions whose sockets an Interrupter can shut down."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from app.interrupt import Interrupter

_local = threading.local()


def _current() -> Interrupter | None:
    return getattr(_local, "interrupter", None)


class _TrackedMixin:
    """Registers the connection's socket with the calling thread's Interrupter before each request."""

    sock: Any

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._track()

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:
            self._track()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def _track(self) -> None:
        interrupter = _current()
        if interrupter is not None and self.sock is not None:
            interrupter.register(self.sock)


class _TrackedHTTPConnection(_TrackedMixin, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_TrackedMixin, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _TrackedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


def _session() -> requests.Session:
    session: requests.Session | None = getattr(_local, "session", None)
    if session is None:
        session = requests.Session()
        adapter = _TrackedAdapter(pool_connections=16, pool_maxsize=16, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.trust_env = False
        _local.session = session
    return session


@contextmanager
def interruptible(interrupter: Interrupter | None) -> Iterator[None]:
    """Within this block, upstream sockets opened or reused by this thread belong to INTERRUPTER."""
    previous = _current()
    _local.interrupter = interrupter
    try:
        yield
    finally:
        _local.interrupter = previous


def post(url: str, *, headers: dict[str, str], body: bytes, stream: bool,
         timeout: tuple[float, float]) -> requests.Response:
    """POST BODY to URL on this thread's keep-alive session; no retries, no environment proxies."""
    return _session().post(url, data=body, headers=headers, stream=stream, timeout=timeout, allow_redirects=False)
