"""Reading request bodies with a hard size limit, for every route that takes one."""

from __future__ import annotations

from collections.abc import Callable

from flask import request

from app.errors import RelayError

_READ_CHUNK = 1 << 20


def read_body(limit: int, too_large: Callable[[int], RelayError]) -> bytes:
    """The body, refused (too_large(limit), a 413) as soon as it passes LIMIT bytes: a chunked upload declares no
    length, and reading it whole first would hold everything past the limit, and a copy, in memory."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    body = bytearray()  # one block, whose memory goes back to the system when a refused body is dropped
    while chunk := request.stream.read(_READ_CHUNK):
        if len(body) + len(chunk) > limit:
            body.clear()
            raise too_large(limit)
        body += chunk
    return bytes(body)
