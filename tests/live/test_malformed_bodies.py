"""Malformed chunked bodies and transfer codings on a real `relay api`: every route that takes a body answers a
broken chunked body with `400 invalid_chunked_body` and closes the connection (it was a 500 on every one), a
transfer coding Relay does not decode is `501 unsupported_transfer_coding` (gzip was accepted and ignored), and
every answer to malformed HTTP carries an `x-request-id`."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests

from app.settings import Settings
from devtools.processes import RelayProcess
from tests.live.test_slow_clients import connect, read_all
from tests.pipeline.helpers import CHAT

pytestmark = pytest.mark.integration

BROKEN = {  # chunked bodies gunicorn cannot parse, each cut at a different step
    "a chunk size that is not hex": b"zz\r\n{}\r\n0\r\n\r\n",
    "a chunk without its line break": b"2\r\n{}XX5\r\n",
    "a bad chunk extension": b'2;a="\x01"\r\n{}\r\n0\r\n\r\n',
    "a trailer line without CR": b"2\r\n{}\r\n0\r\nX-Trailer: 1\nX: 2\n\r\n\r\n",
}


def body_routes(api: RelayProcess) -> list[tuple[str, str, str]]:
    """(method, path, content type) of every documented operation that takes a request body, ids filled in."""
    spec = requests.get(f"{api.url}/openapi.json", timeout=10).json()
    found = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if method not in ("post", "put", "patch", "delete") or "requestBody" not in operation:
                continue
            content_type = next(iter(operation["requestBody"]["content"]))
            filled = re.sub(r"\{[^}]+\}", lambda _: str(uuid.uuid4()), path)
            found.append((method.upper(), filled, content_type))
    return found


def answer_of(api: RelayProcess, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send HEAD + BODY on a fresh connection; the status, headers and body of the answer, read until the server
    closes the connection (a connection kept open fails the test at the socket's timeout)."""
    with connect(api) as sock:
        sock.sendall(head + body)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        answer = read_all(sock)
    head_bytes, _, rest = answer.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, rest


def request_head(method: str, path: str, credential: str, content_type: str, coding: str = "chunked") -> bytes:
    if content_type == "multipart/form-data":
        content_type += "; boundary=x"
    return (f"{method} {path} HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer {credential}\r\n"
            f"Content-Type: {content_type}\r\nTransfer-Encoding: {coding}\r\n\r\n").encode()


@pytest.fixture(scope="module")
def credential(new_key: Callable[[str], str], settings: Settings) -> Callable[[str], str]:
    key = new_key("main")
    return lambda path: settings.admin_token if path.startswith("/admin") else key


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_malformed_chunked_body_is_400_invalid_chunked_body_on_every_route_that_takes_one(
        replicas: list[RelayProcess], credential: Callable[[str], str], broken: str) -> None:
    api = replicas[0]
    routes = body_routes(api)
    assert len(routes) >= 10
    wrong: list[Any] = []
    for method, path, content_type in routes:
        head = request_head(method, path, credential(path), content_type)
        status, headers, body = answer_of(api, head, BROKEN[broken])
        code = json.loads(body)["error"].get("code") if body else None
        if (status, code) != (400, "invalid_chunked_body") or headers.get("connection") != "close" \
                or not headers.get("x-request-id"):
            wrong.append((method, path, status, code, headers.get("connection")))
    assert not wrong


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate, chunked", "compress, chunked"])
def test_a_transfer_coding_relay_does_not_decode_is_501_whatever_the_route(
        replicas: list[RelayProcess], credential: Callable[[str], str], coding: str) -> None:
    import gzip

    packed = gzip.compress(json.dumps(CHAT).encode())
    chunked = b"%x\r\n" % len(packed) + packed + b"\r\n0\r\n\r\n"
    for method, path in [("POST", "/v1/chat/completions"), ("POST", "/v1/batches"), ("GET", "/healthz")]:
        head = request_head(method, path, credential(path), "application/json", coding)
        status, headers, body = answer_of(replicas[0], head, chunked)
        assert status == 501, (path, body)
        assert json.loads(body)["error"]["code"] == "unsupported_transfer_coding"
        assert headers.get("x-request-id") and headers.get("connection") == "close"


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /v1/models HTTP/1.1\r\nHost: relay\r\nContent-Length: abc\r\n\r\n", 400),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: relay\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GARBAGE\r\n\r\n", 400),
])
def test_every_answer_to_malformed_http_carries_a_request_id(replicas: list[RelayProcess], request_bytes: bytes,
                                                             status: int) -> None:
    answered, headers, _ = answer_of(replicas[0], request_bytes)
    assert answered == status
    assert re.fullmatch(r"[0-9a-f]{32}", headers.get("x-request-id", "")), headers
