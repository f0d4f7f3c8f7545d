"""Slow clients on a real `relay api` (deadlines of 1 s): partial requests and streams nobody reads hold nothing
other callers need, and are dropped; malformed HTTP is answered with Relay's JSON error shape."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from app.runtime import Runtime
from devtools.fake_upstream.harness import FakeUpstream
from devtools.processes import RelayProcess
from devtools.waiting import until
from tests.live.conftest import BIG_KEY, bearer
from tests.pipeline.helpers import CHAT, usage_event

pytestmark = pytest.mark.integration
PARTIAL = 200  # connections sending half a request


def connect(api: RelayProcess, receive_buffer: int | None = None) -> socket.socket:
    parts = urlsplit(api.url)
    sock = socket.socket()
    if receive_buffer is not None:  # a tiny window: the server's writes block as soon as its own buffer is full
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(30)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (the socket's 30 s timeout fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@contextmanager
def slow_connections(api: RelayProcess, key: str) -> Iterator[dict[str, list[Any]]]:
    """Half-sent request lines, bodies that stop halfway, and big streams never read."""
    with ExitStack() as stack:
        made: dict[str, list[Any]] = {"lines": [], "bodies": [], "streams": []}
        for i in range(PARTIAL):
            sock = stack.enter_context(connect(api))
            if i % 2:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Len")
                made["lines"].append(sock)
            else:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json"
                             b"\r\nContent-Length: 100\r\nAuthorization: Bearer " + key.encode() + b"\r\n\r\n{\"mod")
                made["bodies"].append(sock)
        for _ in range(3):
            request_id = uuid.uuid4().hex
            body = json.dumps({**CHAT, "stream": True}).encode()
            sock = stack.enter_context(connect(api, receive_buffer=4096))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + key.encode() + b"\r\nx-request-id: "
                         + request_id.encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            made["streams"].append(request_id)
        yield made


@pytest.fixture(scope="module")
def big_key(new_key: Callable[[str], str], upstream: FakeUpstream) -> str:
    upstream.control(BIG_KEY, reply="x" * 8_000_000)  # one 8 MB delta
    return new_key("big")


def test_partial_requests_and_unread_streams_do_not_block_others_and_are_dropped(
        replicas: list[RelayProcess], new_key: Callable[[str], str], big_key: str, runtime: Runtime) -> None:
    api, key = replicas[0], new_key("main")
    with slow_connections(api, big_key) as slow:
        with requests.Session() as session:  # fresh connections, while every slow one is held open
            for _ in range(5):  # a bound only a hang crosses (a loaded CI machine once took over 10 s for one)
                assert session.get(f"{api.url}/healthz", timeout=30).status_code == 200
                assert session.post(f"{api.url}/v1/chat/completions", json=CHAT, headers=bearer(key),
                                    timeout=30).status_code == 200
        for sock in slow["lines"]:
            assert read_all(sock) == b"", "a half-sent request line is dropped without an answer"
        for sock in slow["bodies"]:
            answer = read_all(sock)
            assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer
        for request_id in slow["streams"]:
            event = until(lambda request_id=request_id: _event_or_none(runtime, request_id),
                          what="the cut stream's usage event")
            assert event["streamed"] is True and event["error_code"] == "client_disconnected"


def _event_or_none(runtime: Runtime, request_id: str) -> dict[str, Any] | None:
    try:
        return usage_event(runtime, request_id, timeout=0.01)
    except AssertionError:
        return None


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (b"GET /v1/models HTTP/1.1\r\nHost: relay\r\nContent-Length: abc\r\n\r\n", 400, "invalid_header"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: relay\r\n\r\n", 414, "uri_too_long"),
    (b"GET /healthz HTTP/1.1\r\nHost: relay\r\nBad Header: x\r\n\r\n", 400, "invalid_header"),
    (b"GARBAGE\r\n\r\n", 400, "invalid_request_line"),
    (b"GET /healthz HTTP/7.0\r\nHost: relay\r\n\r\n", 400, "invalid_http_version"),
])
def test_malformed_http_is_answered_with_a_json_error(replicas: list[RelayProcess], request_bytes: bytes,
                                                       status: int, code: str) -> None:
    with connect(replicas[0]) as sock:
        sock.sendall(request_bytes)
        answer = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == code


def _batch_head(key: str, length: int) -> bytes:
    return (b"POST /v1/batches HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nAuthorization: Bearer "
            + key.encode() + b"\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n")


def _batches_of(runtime: Runtime, batch_id: str | None = None) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM batches" + (" WHERE id = %s" if batch_id else ""),
                           (batch_id,) if batch_id else ()).fetchone()
    return int(row["n"]) if row else 0


def test_a_batch_body_is_read_whole_with_the_next_request_pipelined_behind_it(
        replicas: list[RelayProcess], new_key: Callable[[str], str], runtime: Runtime) -> None:
    """The body is received straight from the socket (app/api/bodies.py): bytes of the next request that arrived
    with it are left for that request."""
    key = new_key("main")
    body = json.dumps({"shape": "openai", "requests": [CHAT] * 50}).encode()
    with connect(replicas[0]) as sock:
        sock.sendall(_batch_head(key, len(body)) + body
                     + b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        answer = read_all(sock)
    first, _, rest = answer.partition(b"HTTP/1.1 200 ")
    assert first.startswith(b"HTTP/1.1 202 "), answer[:300]
    batch = json.loads(first.partition(b"\r\n\r\n")[2])
    assert batch["total"] == 50 and _batches_of(runtime, batch["id"]) == 1
    assert rest, "the pipelined request is answered"


def test_a_batch_body_cut_short_is_answered_408_and_stores_nothing(
        replicas: list[RelayProcess], new_key: Callable[[str], str], runtime: Runtime) -> None:
    key = new_key("main")
    body = json.dumps({"shape": "openai", "requests": [CHAT] * 2000}).encode()
    before = _batches_of(runtime)
    with connect(replicas[0]) as sock:
        sock.sendall(_batch_head(key, len(body)) + body[:len(body) // 2])
        sock.shutdown(socket.SHUT_WR)  # the client stops sending halfway
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer, answer[:300]
    assert _batches_of(runtime) == before
