"""Reading request bodies with a hard size limit, for every route that takes one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import request
from gunicorn.http.body import Body, LengthReader
from gunicorn.http.unreader import SocketUnreader
from werkzeug.exceptions import ClientDisconnected

from app.batches.validation import STRICT_JSON, json_problem
from app.errors import BadRequest, BodyNotObject, InvalidJson, RelayError, UnsupportedMediaType

_READ_CHUNK = 1 << 20


class MalformedBody(BadRequest):
    """A chunked body the server could not parse while the app read it; the connection is not reused."""

    code = "invalid_chunked_body"

    def __init__(self) -> None:
        super().__init__(message="the chunked request body is malformed", headers={"Connection": "close"})
_ZEROS = bytes(_READ_CHUNK)


def read_body(limit: int, too_large: Callable[[int], RelayError]) -> bytes | bytearray:
    """The body, refused (too_large(limit), a 413) as soon as it passes LIMIT bytes: a chunked upload declares no
    length, and reading it whole first would hold everything past the limit, and a copy, in memory."""
    length = request.content_length
    if length is not None and length > limit:
        raise too_large(limit)
    if length is not None and (received := _received_whole(length)) is not None:
        return received
    body = bytearray()  # one block, whose memory goes back to the system when a refused body is dropped
    while chunk := request.stream.read(_READ_CHUNK):
        if len(body) + len(chunk) > limit:
            body.clear()
            raise too_large(limit)
        body += chunk
    return bytes(body)


def _received_whole(length: int) -> bytearray | None:
    """Under gunicorn (`relay api`), a body of LENGTH bytes received straight from the socket into one buffer,
    before anything else read it; None elsewhere, and the WSGI stream is read instead. gunicorn's stream copies
    each chunk it receives three times over (about 15 ms for a 10 MiB batch, most of what reading it costs)."""
    stream = request.environ.get("wsgi.input")
    reader = getattr(stream, "reader", None)
    if not isinstance(stream, Body) or not isinstance(reader, LengthReader) or reader.length != length \
            or stream.buf.tell() or not isinstance(reader.unreader, SocketUnreader):
        return None
    unreader = reader.unreader
    early = unreader.take_buffered()  # what arrived with the head
    if len(early) > length:
        unreader.unread(early[length:])  # a pipelined next request
    reader.length = 0  # the stream now holds nothing more of this body
    body = bytearray(early[:length])
    got = len(body)
    while got < length:
        if got == len(body):  # room for the next chunk, zeroed: memory follows what arrives, not the header's length
            body += memoryview(_ZEROS)[:length - got]
        try:
            with memoryview(body) as whole, whole[got:] as room:
                count = unreader.sock.recv_into(room)
        except OSError:  # the server's I/O deadline (a timeout), or a reset
            count = 0
        if not count:
            stream.failed = True  # where the next request starts is unknown: the connection is not reused
            raise ClientDisconnected()
        got += count
    return body  # a bytearray: bytes-like, and never changed after this


def json_text(raw: bytes | bytearray) -> str:
    """RAW as UTF-8 text (a leading byte order mark dropped), or a 400: bytes that are not UTF-8, raw surrogate
    bytes (ED A0 80...) included, which json.loads would otherwise turn into strings no upstream can encode."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidJson(message=f"the request body is not valid UTF-8: {exc.reason} at byte {exc.start}") \
            from None


def require_json(refusal: type[RelayError] = UnsupportedMediaType,
                 message: str = "send the body as application/json") -> None:
    """The one media-type check of a JSON body: application/json, a +json type, or none given; REFUSAL (415 by
    default) otherwise."""
    mimetype = request.mimetype or ""
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise refusal(message=message)


def json_value(text: str) -> Any:
    """TEXT (from json_text) as Relay's one strict JSON: no NaN or Infinity, no integer past 4,300 digits; a 400
    invalid_json naming the problem otherwise (also for nesting too deep for the decoder)."""
    try:
        return STRICT_JSON.decode(text or "null")
    except ValueError as exc:
        raise InvalidJson(message=f"the request body is not valid JSON: {json_problem(exc)}") from None
    except RecursionError:
        raise InvalidJson(message="the request body is nested too deeply") from None


def decode_object(text: str) -> dict[str, Any]:
    """TEXT as a strict JSON object (json_value), or a 400 invalid_body when it is another JSON value."""
    body = json_value(text)
    if not isinstance(body, dict):
        raise BodyNotObject(message="the request body must be a JSON object")
    return body
