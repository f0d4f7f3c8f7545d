"""Run the Flask app under gunicorn's gevent worker: one greenlet per connection, so a slow client holds a few KB of
its own, never a thread another request needs.

The worker (RelayGeventWorker) adds what gunicorn's gevent worker lacks for Relay:
- TCP_NODELAY on every connection (a keep-alive client would otherwise wait ~40 ms per request for delayed ACKs);
- a deadline for a request's line and headers (RELAY_API_HEADER_TIMEOUT_S, also the keep-alive idle time) and one
  for every read or write on the connection (RELAY_API_IO_TIMEOUT_S: a body that stops arriving is a 408, a stream
  nobody reads is cut and recorded as `client_disconnected`): the connection is dropped;
- malformed HTTP (bad request line or headers, an oversize URI or header block, a bad Content-Length or chunked
  body) answered with Relay's JSON error shape instead of gunicorn's HTML page, with an `x-request-id`; a chunked
  body found malformed while the app reads it is the app's `400 invalid_chunked_body` (it reached Flask as a
  500), and a transfer coding Relay does not decode (`gzip, chunked`: gunicorn passes the coded bytes on) is
  `501 unsupported_transfer_coding`;
- on a graceful stop (SIGTERM), the process's runtime is closed after the last request: the usage writer commits
  everything pending first.

The process must be monkey-patched by gevent before psycopg is imported (psycopg picks its wait function at import
time), so `relay api` starts a fresh interpreter that patches first (app.commands.server).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import uuid
from collections.abc import Callable
from typing import Any

import gevent
from gunicorn.app.base import BaseApplication
from gunicorn.http import errors as http_errors
from gunicorn.http import wsgi as gunicorn_wsgi
from gunicorn.http.body import ChunkedReader
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker
from werkzeug.exceptions import ClientDisconnected

from app.api.bodies import MalformedBody
from app.api.connections import ConnectionSlots, TooManyConnections
from app.errors import InternalError, RelayError
from app.runtime import freeze_boot_heap

log = logging.getLogger("relay.api.server")
GRACEFUL_TIMEOUT_S = 30  # a SIGTERM lets running requests finish for this long
# How long a busy request greenlet keeps the GIL from a native thread of the worker that wants it back after a
# system call (Python's default is 5 ms). A batch's request file is written on such a thread while the request
# checks and copies its items: with the default it waited up to 5 ms after each of its writes, and finished
# ~15 ms after them for a 10,000-item batch instead of before.
SWITCH_INTERVAL_S = 0.0005

# gunicorn's parse errors → (status, Relay error code, message); the first matching class wins.
_PARSE_ERRORS: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (http_errors.LimitRequestLine, 414, "uri_too_long", "the request line is too long"),
    (http_errors.LimitRequestHeaders, 431, "headers_too_large", "too many or too large request headers"),
    (http_errors.UnsupportedTransferCoding, 501, "unsupported_transfer_coding", "unsupported Transfer-Encoding"),
    (http_errors.ExpectationFailed, 417, "expectation_failed", "unsupported Expect header"),
    (http_errors.InvalidRequestLine, 400, "invalid_request_line", "the request line is not valid HTTP"),
    (http_errors.InvalidRequestMethod, 400, "invalid_request_line", "the request method is not valid"),
    (http_errors.InvalidHTTPVersion, 400, "invalid_http_version", "unsupported HTTP version"),
    (http_errors.InvalidHeaderName, 400, "invalid_header", "a request header name is not valid"),
    (http_errors.InvalidHeader, 400, "invalid_header", "a request header is not valid (Content-Length included)"),
    (http_errors.ObsoleteFolding, 400, "invalid_header", "folded request headers are not accepted"),
    (http_errors.InvalidChunkSize, 400, "invalid_chunked_body", "the chunked request body is malformed"),
    (http_errors.ChunkMissingTerminator, 400, "invalid_chunked_body", "the chunked request body is malformed"),
    (http_errors.InvalidChunkExtension, 400, "invalid_chunked_body", "the chunked request body is malformed"),
    (http_errors.ParseException, 400, "bad_request", "the request is not valid HTTP"),
    (TooManyConnections, 503, "too_many_connections", "too many open connections from this address"),
)
_REASONS = {400: "Bad Request", 414: "URI Too Long", 417: "Expectation Failed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable"}


def error_answer(exc: BaseException, request_id: str) -> bytes:
    """The whole HTTP answer (connection closed after it) for a request gunicorn could not parse."""
    error: RelayError = InternalError(message="internal error")
    for kind, kind_status, kind_code, kind_message in _PARSE_ERRORS:
        if isinstance(exc, kind):
            error = RelayError(kind_message, code=kind_code, status=kind_status)  # gunicorn's error, translated
            break
    body = json.dumps(error.to_dict()).encode()
    head = (f"HTTP/1.1 {error.status} {_REASONS[error.status]}\r\nConnection: close\r\n"
            "Content-Type: application/json\r\n"
            f"x-request-id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def refuse_undecoded_codings(headers: list[tuple[str, str]]) -> None:
    """Raise UnsupportedTransferCoding for a transfer coding other than chunked: gunicorn accepts gzip, deflate and
    compress before chunked and hands the app the coded bytes, which Relay would read as the body itself."""
    for name, value in headers:
        if name == "TRANSFER-ENCODING" and any(v.strip(" \t").lower() != "chunked" for v in value.split(",")):
            raise http_errors.UnsupportedTransferCoding(value)


class CheckedChunks:
    """A chunked body's reader for the app: gunicorn's parse errors, raised while the app reads the body, become
    `400 invalid_chunked_body` and a client gone mid-body the app's ClientDisconnected (both reached Flask's
    catch-all as 500s); the answer then says `Connection: close` (where the next request starts is unknown), as
    the connection is. Once the app has answered, gunicorn itself drains what is left: an error then closes the
    connection quietly (NoMoreData) instead of sending a second answer."""

    def __init__(self, req: Any) -> None:
        self._req = req
        self._reader: ChunkedReader = req.body.reader
        self.answered = False

    def read(self, size: int) -> bytes:
        try:
            return bytes(self._reader.read(size))
        except (http_errors.ParseException, OSError) as exc:  # gunicorn's NoMoreData is an OSError
            if self.answered:
                raise http_errors.NoMoreData() from exc
            self._req.force_close()
            if isinstance(exc, http_errors.ParseException):
                raise MalformedBody() from exc
            raise ClientDisconnected() from exc


class RelayGeventWorker(GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker with TCP_NODELAY, I/O deadlines, JSON answers to malformed HTTP, and connection
    slots idle connections cannot all take (app/api/connections.py)."""

    io_timeout_s = 30.0  # set from the settings before the workers fork
    connections_per_address = -1  # likewise: -1 half of --connections, 0 no cap
    _slots: ConnectionSlots | None = None

    def slots(self) -> ConnectionSlots:
        if self._slots is None:
            cap = self.connections_per_address
            self._slots = ConnectionSlots(self.worker_connections, self.worker_connections // 2 if cap < 0 else cap)
        return self._slots

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        address = str(addr[0]) if isinstance(addr, tuple) and addr else ""
        try:
            self.slots().admit(client, address)
        except TooManyConnections as exc:
            self._refuse(client, exc)
            return
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.settimeout(self.io_timeout_s)  # GeventWorker.handle would make it blocking again: skip it
            AsyncWorker.handle(self, listener, client, addr)
        finally:
            self.slots().release(client, address)

    def handle_exit(self, sig: Any, frame: Any) -> None:
        """SIGTERM: stop as gunicorn does, and close the idle keep-alive connections at once, since their greenlets
        would otherwise wait out the keep-alive deadline before the worker can exit."""
        super().handle_exit(sig, frame)
        gevent.spawn(self._close_idle)

    def _close_idle(self) -> None:
        closed = self.slots().close_idle()
        if closed:
            self.log.info("graceful stop: closed %d idle keep-alive connection(s)", closed)

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> Any:
        refuse_undecoded_codings(req.headers)
        checked = None
        if isinstance(req.body.reader, ChunkedReader):
            checked = req.body.reader = CheckedChunks(req)
        self.slots().busy(sock)
        try:
            return super().handle_request(listener_name, req, sock, addr)
        finally:
            if checked is not None:
                checked.answered = True
            if self.alive:
                self.slots().idle(sock)
            else:  # stopping: answered, so closed now rather than left to wait for a next request
                self.slots().busy(sock)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _refuse(self, client: socket.socket, exc: TooManyConnections) -> None:
        """Answer a connection over its address's cap (503) and close it, without reading anything."""
        try:
            client.settimeout(1.0)
            client.sendall(error_answer(exc, uuid.uuid4().hex))
        except OSError:
            pass
        finally:
            client.close()

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        request_id = uuid.uuid4().hex
        if isinstance(exc, http_errors.ParseException):
            self.log.info("malformed request from %s: %s (x-request-id %s)", (addr or ("",))[0],
                          type(exc).__name__, request_id)
        else:
            self.log.exception("error handling a request (x-request-id %s)", request_id)
        try:
            client.sendall(error_answer(exc, request_id))
        except OSError:
            pass


class OneWriteResponse(gunicorn_wsgi.Response):  # type: ignore[misc]
    """gunicorn's response whose head leaves with the first body bytes, in one send: gunicorn sends them apart
    (two system calls, and two segments for the client to wait for). Whatever gunicorn would have sent by the end
    of a write() or close() is sent by then here too; a file sent with sendfile() has its head sent first."""

    headers_sent: bool
    _head = b""
    _head_at_once = False

    def send_headers(self) -> None:
        if self.headers_sent:
            return
        lines = self.default_headers()
        lines.extend(f"{name}: {value}\r\n" for name, value in self.headers)
        self._head = ("".join(lines) + "\r\n").encode("latin-1")
        self.headers_sent = True
        if self._head_at_once:
            self._send_head()

    def _send_head(self) -> None:
        head, self._head = self._head, b""
        if head:
            self.sock.sendall(head)

    def _emit_body(self, data: bytes) -> None:
        if self.chunked:
            data = b"%X\r\n%s\r\n" % (len(data), data)
        head, self._head = self._head, b""
        self.sock.sendall(head + data if head else data)

    def write(self, arg: bytes) -> None:
        super().write(arg)
        self._send_head()  # a write that emitted nothing (no body allowed, or past Content-Length) still sends it

    def sendfile(self, respiter: Any) -> bool:
        self._head_at_once = True
        return bool(super().sendfile(respiter))

    def close(self) -> None:
        if not self.headers_sent:
            self.send_headers()
        if self.chunked:
            self._emit_body(b"")  # the last chunk
        else:
            self._send_head()


class _RelayGunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, create_app: Callable[[], Any], options: dict[str, Any]) -> None:
        self.create_app = create_app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Runs in each worker after fork, so the pool and broker connections are per process.
        app = self.create_app()
        freeze_boot_heap()
        return app


def _close_runtime(_server: Any, worker: Any) -> None:
    """gunicorn's worker_exit hook: commit pending usage records and close the process's resources."""
    app = getattr(worker, "wsgi", None)
    runtime = getattr(app, "extensions", {}).get("relay") if app is not None else None
    if runtime is not None:
        runtime.close()


def run_gunicorn(create_app: Callable[[], Any], *, bind: str, workers: int, connections: int, header_timeout_s: int,
                 io_timeout_s: float, connections_per_address: int = -1) -> None:
    """Serve the WSGI app CREATE_APP builds in each worker (after the fork) under gunicorn's gevent workers."""
    RelayGeventWorker.io_timeout_s = io_timeout_s
    RelayGeventWorker.connections_per_address = connections_per_address
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # inherited by the forked workers
    gunicorn_wsgi.Response = OneWriteResponse  # what gunicorn_wsgi.create() answers with, in the forked workers too
    options = {
        "bind": bind,
        "workers": workers,
        "worker_class": "app.api.server.RelayGeventWorker",
        "worker_connections": connections,
        "keepalive": header_timeout_s,
        "timeout": 30,  # the arbiter's liveness check of a worker (its heartbeat runs on the gevent hub)
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        "worker_exit": _close_runtime,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "limit_request_line": 8190,
    }
    _RelayGunicorn(create_app, options).run()
