"""http.client's connections and response with two of their per-call costs taken out, for the upstream client.

- A request's headers and a bytes body leave in one send: http.client sends them apart (two syscalls, two TCP
  segments under TCP_NODELAY, and two reads for the server).
- An answer's header block is split into its lines here, into the same `HTTPMessage`: http.client hands it to the
  `email` package's parser, about 20 µs of CPU for an upstream's half-dozen headers against about 3 µs here.

Everything else (status line, 1xx answers, chunked and length-delimited bodies, keep-alive) is http.client's.
"""

from __future__ import annotations

import http.client
from typing import Any, BinaryIO

MAX_LINE = 65536  # http.client's limits on a header line and on the number of headers
MAX_HEADERS = 100


def read_headers(fp: BinaryIO) -> http.client.HTTPMessage:
    """The header block at FP, up to its blank line, as http.client's message: a line starting with a space or
    a tab continues the header before it; a line with no colon is skipped."""
    message = http.client.HTTPMessage()
    name, value, count = "", "", 0
    while True:
        line = fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("header line")
        count += 1
        if count > MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            break
        text = line.decode("iso-8859-1")
        if text[0] in " \t" and name:
            value += " " + text.strip()
            continue
        if name:
            message[name] = value
        name, colon, rest = text.partition(":")
        name, value = (name, rest.strip()) if colon else ("", "")
    if name:
        message[name] = value
    return message


class Response(http.client.HTTPResponse):
    """http.client's response, its headers read by read_headers."""

    _method: str | None

    def begin(self) -> None:
        """http.client's begin() (CPython 3.11), with read_headers in place of its email parser."""
        if self.headers is not None:
            return
        version, status, reason = self._read_status()  # type: ignore[attr-defined]
        while status == http.client.CONTINUE:  # skip any 100 Continue, headers and all
            read_headers(self.fp)
            version, status, reason = self._read_status()  # type: ignore[attr-defined]
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = read_headers(self.fp)
        self.chunked = (self.headers.get("transfer-encoding") or "").lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()  # type: ignore[attr-defined]
        self.length = None if self.chunked else _length(self.headers.get("content-length"))
        if status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED) or 100 <= status < 200 \
                or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # nothing says where the body ends: the connection's close does


def _length(value: str | None) -> int | None:
    """A Content-Length's value, None when missing, not a number, or negative (as http.client takes it)."""
    try:
        length = int(value) if value else None
    except ValueError:
        return None
    return length if length is None or length >= 0 else None


class Connection(http.client.HTTPConnection):
    """http.client's connection whose request leaves in one send, and whose answers are Responses."""

    response_class = Response
    _buffer: list[bytes]  # the request line and headers so far, as http.client keeps them

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if not isinstance(message_body, bytes) or encode_chunked:
            super()._send_output(message_body, encode_chunked)  # type: ignore[misc]
            return
        self._buffer.extend((b"", message_body))  # joined: the headers, a blank line, the body
        data = b"\r\n".join(self._buffer)
        del self._buffer[:]
        self.send(data)


class HTTPSConnection(Connection, http.client.HTTPSConnection):
    """The same over TLS (http.client's HTTPSConnection connects)."""
