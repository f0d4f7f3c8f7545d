"""What the OpenAI- and Anthropic-compatible blueprints share: one view under several prefixes, errors in the
provider's shape, and small JSON bodies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, current_app, jsonify, make_response
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint
from marshmallow import Schema, ValidationError
from werkzeug.exceptions import HTTPException

from app.api.bodies import decode_object, json_text, read_body, require_json
from app.api.inference_errors import shaped_error
from app.errors import (
    PayloadTooLarge,
    RelayError,
    ValidationFailed,
    from_http_exception,
)
from app.runtime import Runtime

F = TypeVar("F", bound=Callable[..., Any])
SMALL_BODY = 64 * 1024  # a create body that names a file, or a cancel


def runtime() -> Runtime:
    return current_app.extensions["relay"]  # type: ignore[no-any-return]


def routes(blp: Blueprint, paths: list[str], methods: list[str]) -> Callable[[F], F]:
    """Register the view under every path of PATHS (one endpoint each, all documented)."""

    def register(view: F) -> F:
        for n, path in enumerate(paths):
            blp.route(path, methods=methods, endpoint=f"{view.__name__}_{n}")(view)
        return view

    return register


def shape_errors(blp: Blueprint, shape: str) -> None:
    """Answer every error of BLP's views in SHAPE's error object (`openai` or `anthropic`), with Relay's code."""

    @blp.errorhandler(RelayError)
    def relay_error(exc: RelayError) -> ResponseReturnValue:
        return shaped_error(shape, exc)

    @blp.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> ResponseReturnValue:
        return shaped_error(shape, from_http_exception(exc))


def answer(shape: str, produce: Callable[[], Any], status: int = 200) -> Response:
    """PRODUCE()'s value as a JSON response, or its RelayError in SHAPE's error object: for views of another
    blueprint (a Response passes through their response schema untouched)."""
    try:
        response = jsonify(produce())
        response.status_code = status
        return response
    except RelayError as exc:
        return make_response(shaped_error(shape, exc))


def json_object(schema: Schema | None = None, *, limit: int = SMALL_BODY) -> dict[str, Any]:
    """The request's JSON object body (at most LIMIT bytes), loaded through SCHEMA when given."""
    return load_object(read_json_bytes(limit), schema)


def read_json_bytes(limit: int) -> bytes | bytearray:
    """The raw body of a JSON request, refused past LIMIT bytes (413) or in another media type (415)."""
    require_json()
    return read_body(limit, _too_large)


def load_object(raw: bytes | bytearray, schema: Schema | None = None) -> dict[str, Any]:
    """RAW as a JSON object, loaded through SCHEMA when given; 400 naming what is wrong."""
    body = decode_object(json_text(raw))
    if schema is None:
        return body
    try:
        return schema.load(body)  # type: ignore[no-any-return]
    except ValidationError as exc:
        fields = exc.messages if isinstance(exc.messages, dict) else {"": exc.messages}
        first = next(iter(fields), "")
        problem = fields[first][0] if isinstance(fields[first], list) and fields[first] else fields[first]
        raise ValidationFailed(message=f"invalid request: {first}: {problem}",
                               details=exc.messages) from None


def _too_large(limit: int) -> RelayError:
    return PayloadTooLarge(message=f"the body holds at most {limit} bytes")
