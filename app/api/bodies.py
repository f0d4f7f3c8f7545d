"""Reading request bodies with a hard size limit, for every route that takes one."""

from __future__ import annotations

from collections.abc import Callable

from flask import request

from app.errors import BadRequest, RelayError

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


def json_text(raw: bytes) -> str:
    """RAW as UTF-8 text (a leading byte order mark dropped), or a 400: bytes that are not UTF-8, raw surrogate
    bytes (ED A0 80...) included, which json.loads would otherwise turn into strings no upstream can encode."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRequest("invalid_json", f"the request body is not valid UTF-8: {exc.reason} at byte {exc.start}") \
            from None
