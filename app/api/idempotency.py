"""`Idempotency-Key` on the create routes: the same key from the same caller within 24 h answers the first
request's answer (same status, same body) and creates nothing; the same key with another request (another route or
body) is `409 idempotency_key_reused`. Requests with one key run one at a time: the second waits for the first.

Only a successful answer (2xx) is kept: a refused create leaves the key free, so a corrected retry may use it.
The request's fingerprint is the sha256 of its method, path and body (a multipart body without its boundary),
hashed as the view reads the body (so a large batch or an upload is never held twice in memory), then of whatever
the view left unread."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, current_app, make_response, request

from app.api.callers import request_caller
from app.idempotency import store
from app.idempotency.errors import IdempotencyKeyReused, InvalidIdempotencyKey
from app.runtime import Runtime

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"  # set on an answer given again
_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # printable ASCII without spaces, as the providers' SDKs send them
_DRAIN_CHUNK = 1 << 20
F = TypeVar("F", bound=Callable[..., Any])
DOC_MARK = "x-idempotency-key"  # on an operation's doc: app/api/openapi.py documents the header and its 409 there
PARAMETER = {"in": "header", "name": HEADER, "required": False,
             "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
             "description": "the same key from the same caller within 24 h answers the first request's answer and "
                            "creates nothing; with another request it is 409 idempotency_key_reused"}


class _Fingerprint:
    """The sha256 of what is fed, without any occurrence of DROP (a multipart body's boundary, which a client draws
    anew for each attempt: a retry of the same upload must fingerprint the same)."""

    def __init__(self, head: bytes, drop: bytes = b"") -> None:
        self._hash = hashlib.sha256(head)
        self._drop = drop
        self._held = b""  # the end of what came, which may begin an occurrence of DROP

    def update(self, data: bytes) -> None:
        if not self._drop:
            self._hash.update(data)
            return
        text = (self._held + data).replace(self._drop, b"")
        cut = max(0, len(text) - len(self._drop) + 1)
        self._hash.update(text[:cut])
        self._held = text[cut:]

    def digest(self) -> bytes:
        self._hash.update(self._held)
        self._held = b""
        return self._hash.digest()


class _HashingInput:
    """The WSGI input, hashed as it is read."""

    def __init__(self, stream: Any, digest: _Fingerprint) -> None:
        self._stream = stream
        self._digest = digest

    def read(self, size: int | None = -1) -> bytes:
        data = self._stream.read(-1 if size is None else size)
        self._digest.update(data)
        return data  # type: ignore[no-any-return]

    def readline(self, size: int | None = -1) -> bytes:
        data = self._stream.readline(-1 if size is None else size)
        self._digest.update(data)
        return data  # type: ignore[no-any-return]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def idempotent(view: F) -> F:
    """Make a create view answer a retried `Idempotency-Key` with its first answer (see the module's docstring).
    Put it right below the route decorator, so that it wraps the view's whole answer."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = request.headers.get(HEADER)
        if key is None:
            return view(*args, **kwargs)
        if not _KEY.fullmatch(key):
            raise InvalidIdempotencyKey(message=f"{HEADER} must be 1 to 255 printable ASCII characters, no spaces")
        owner = request_caller().owner
        boundary = request.mimetype_params.get("boundary", "") if request.mimetype.startswith("multipart/") else ""
        digest = _Fingerprint(f"{request.method} {request.path}\n".encode(), boundary.encode())
        request.environ["wsgi.input"] = _HashingInput(request.environ["wsgi.input"], digest)
        runtime: Runtime = current_app.extensions["relay"]
        with runtime.pool.connection() as conn, conn.transaction():
            store.lock_key(conn, owner, key)
            kept = store.kept_answer(conn, owner, key)
            if kept is not None:
                return _replay(kept, _fingerprint(digest))
            response = make_response(view(*args, **kwargs))
            if 200 <= response.status_code < 300 and not response.is_streamed:
                store.keep_answer(conn, owner, key, store.KeptAnswer(
                    _fingerprint(digest), response.status_code, response.content_type or "application/json",
                    response.get_data()))
            return response

    apidoc = getattr(view, "_apidoc", {})  # flask-smorest's doc of the view, marked (a copy: the view's is left)
    wrapper._apidoc = {**apidoc, "manual_doc": {**apidoc.get("manual_doc", {}), DOC_MARK: True}}  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _fingerprint(digest: _Fingerprint) -> bytes:
    """The request's fingerprint once the rest of its body is read."""
    try:
        while request.stream.read(_DRAIN_CHUNK):
            pass
    except Exception:  # a body past the route's limit, or a client gone: it cannot be the first request again
        digest.update(b"\0unread")
    return digest.digest()


def _replay(kept: store.KeptAnswer, fingerprint: bytes) -> Response:
    """The first answer again, or 409 when the key came with another request."""
    if fingerprint != kept.fingerprint:
        raise IdempotencyKeyReused(message=f"this {HEADER} was used in the last {store.KEPT_HOURS} h for another"
                                           " request (another route or body): send a new key for a new request")
    response = Response(kept.body, status=kept.status, content_type=kept.content_type)
    response.headers[REPLAYED] = "true"
    return response
