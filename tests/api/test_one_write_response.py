"""The API server's response (app/api/server.py, OneWriteResponse) puts the same bytes on the wire as gunicorn's own,
in fewer sends: the head leaves with the first body bytes. Each case runs both on a real socket pair and compares
what the peer received and how many sends carried it."""

from __future__ import annotations

import re
import socket
import tempfile
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http import wsgi as gunicorn_wsgi

from app.api.server import OneWriteResponse


class RecordingSocket(socket.socket):
    """A real socket that counts its sendall calls."""

    sends = 0

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.sends += 1
        super().sendall(data, flags)


def run(response_class: type, method: str, status: str, headers: list[tuple[str, str]],
        script: Callable[[Any], None]) -> tuple[bytes, int]:
    """(the bytes the peer received with the Date header blanked, the number of sendall calls) for SCRIPT run on a
    response of RESPONSE_CLASS to a METHOD request."""
    left, right = socket.socketpair()
    sock = RecordingSocket(fileno=left.detach())
    req = SimpleNamespace(version=(1, 1), method=method, should_close=lambda: False)
    resp = response_class(req, sock, Config())
    resp.start_response(status, headers)
    script(resp)
    sock.close()
    received = b""
    while chunk := right.recv(65536):
        received += chunk
    right.close()
    return re.sub(rb"Date: [^\r]*\r\n", b"Date: -\r\n", received), sock.sends


def written(*parts: bytes) -> Callable[[Any], None]:
    def script(resp: Any) -> None:
        for part in parts:
            resp.write(part)
        resp.close()
    return script


CASES = {
    "sized body": ("POST", "200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")],
                   written(b"{}"), (1, 2)),
    "sized body in two writes": ("GET", "200 OK", [("Content-Length", "5")], written(b"ab", b"cde"), (2, 3)),
    "body past its length": ("GET", "200 OK", [("Content-Length", "3")], written(b"abcdef", b"gh"), (1, 2)),
    "chunked stream": ("POST", "200 OK", [("Content-Type", "text/event-stream")],
                       written(b"data: 1\n\n", b"", b"data: 2\n\n"), (3, 4)),
    # no body: the head alone, in one send either way
    "empty body": ("GET", "204 No Content", [], written(b""), (1, 1)),
    "HEAD": ("HEAD", "200 OK", [("Content-Length", "10")], written(b"0123456789"), (1, 1)),
    "nothing written": ("GET", "200 OK", [("Content-Length", "0")], written(), (1, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_bytes_as_gunicorns_response_with_the_head_in_the_first_send(case: str) -> None:
    method, status, headers, script, sends = CASES[case]  # sends: (ours, gunicorn's)
    theirs, their_sends = run(gunicorn_wsgi.Response, method, status, headers, script)
    ours, our_sends = run(OneWriteResponse, method, status, headers, script)
    assert ours == theirs
    assert ours.startswith(b"HTTP/1.1 " + status.encode())
    assert (our_sends, their_sends) == sends


def test_a_file_sent_with_sendfile_follows_its_head() -> None:
    with tempfile.TemporaryFile() as file:
        file.write(b"x" * 100_000)
        file.seek(0)

        def script(resp: Any) -> None:
            resp.write_file(gunicorn_wsgi.FileWrapper(file))
            resp.close()
        theirs, _ = run(gunicorn_wsgi.Response, "GET", "200 OK", [("Content-Length", "100000")], script)
        file.seek(0)
        ours, _ = run(OneWriteResponse, "GET", "200 OK", [("Content-Length", "100000")], script)
    assert ours == theirs
    assert ours.endswith(b"\r\n\r\n" + b"x" * 100_000)
