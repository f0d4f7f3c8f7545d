"""The upstream client's http.client pieces: a request leaves in one send, an answer's headers read as http.client
reads them (without its email parser), bodies of every framing read whole on a kept-alive connection."""

from __future__ import annotations

import http.client
import io
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from app.pipeline.http1 import Connection, read_headers
from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream

BLOCKS = [
    b"Content-Type: application/json\r\nContent-Length: 412\r\nX-Request-Id: req_1\r\n\r\n",
    b"content-type:text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
    b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nRetry-After:  7  \r\nx-ratelimit-remaining-requests: 0\r\n\r\n",
    b"Date: Fri, 04 Dec 2026 23:59:29 GMT\nServer: caf\xe9\n\n",  # bare LFs, a Latin-1 byte
    b"\r\n",
]


@pytest.mark.parametrize("block", BLOCKS)
def test_an_answers_headers_read_as_http_client_reads_them(block: bytes) -> None:
    ours, theirs = read_headers(io.BytesIO(block + b"body")), http.client.parse_headers(io.BytesIO(block + b"body"))
    assert [(k, v.strip()) for k, v in ours.items()] == [(k, v.strip()) for k, v in theirs.items()]
    assert isinstance(ours, http.client.HTTPMessage)


def test_folded_and_malformed_header_lines_keep_the_headers_around_them() -> None:
    block = b"X-Long: one\r\n  two\r\n\tthree\r\nno colon here\r\nRetry-After: 3\r\n\r\nbody"
    fp = io.BytesIO(block)
    headers = read_headers(fp)
    assert headers.get("x-long") == "one two three" and headers.get("RETRY-AFTER") == "3"
    assert fp.read() == b"body"  # the body is left where it starts


def test_too_many_or_too_long_header_lines_are_refused_as_http_client_refuses_them() -> None:
    with pytest.raises(http.client.HTTPException):
        read_headers(io.BytesIO(b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n"))
    with pytest.raises(http.client.LineTooLong):
        read_headers(io.BytesIO(b"X: " + b"a" * 70_000 + b"\r\n\r\n"))


class RecordingSocket:
    """A socket that records what each sendall was given."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sent = sock, []

    def sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))
        self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = start_fake_upstream()
    yield fake
    fake.stop()


def _post(conn: Connection, body: dict[str, Any]) -> tuple[http.client.HTTPResponse, bytes]:
    data = json.dumps(body).encode()
    conn.request("POST", "/v1/chat/completions", body=data,
                 headers={"content-type": "application/json", "authorization": "Bearer sk-http1"})
    response = conn.getresponse()
    return response, response.read()


def test_a_request_leaves_in_one_send_and_its_answers_read_whole_on_one_connection(upstream: FakeUpstream) -> None:
    host, port = upstream.url.removeprefix("http://").split(":")
    conn = Connection(host, int(port), timeout=30)
    conn.connect()
    recording = conn.sock = RecordingSocket(conn.sock)  # type: ignore[assignment]
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello " * 200}]}
    whole, body = _post(conn, chat)
    assert len(recording.sent) == 1  # the request line, headers and body together
    assert recording.sent[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert recording.sent[0].endswith(b"\r\n\r\n" + json.dumps(chat).encode())
    assert whole.status == 200 and whole.headers.get("content-type", "").startswith("application/json")
    assert whole.length == 0 and not whole.will_close and json.loads(body)["choices"]
    streamed, events = _post(conn, {**chat, "stream": True})  # the same connection, kept alive
    assert streamed.status == 200 and streamed.chunked and events.rstrip().endswith(b"data: [DONE]")
    failed, error = _post(conn, {"model": "gpt-4o-mini"})  # no messages: the upstream's 400
    assert failed.status == 400 and json.loads(error)["error"]
    assert len(recording.sent) == 3 and conn.sock is recording  # never reconnected
    conn.close()
