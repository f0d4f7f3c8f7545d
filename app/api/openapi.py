"""The OpenAPI document made to say what the server answers: Relay's error body as the `default` answer, 400
(never 422: a failed argument check is answered 400 by the app's one HTTP error handler), and the statuses every
route of a kind can give, added to each operation as its routes are registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from apispec import BasePlugin
from flask_smorest import Api, Blueprint

from app.api.idempotency import DOC_MARK, PARAMETER
from schemas.admin import RelayErrorSchema
from schemas.inference import ShapedErrorSchema

F = TypeVar("F", bound=Callable[..., Any])
# A status → the component flask-smorest registers for it (its body: ERROR_SCHEMA).
_COMPONENTS = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 404: "NOT_FOUND", 413: "REQUEST_ENTITY_TOO_LARGE"}


# Routes of the provider-compatible batch APIs answer errors in that provider's shape (OpenAI's or Anthropic's),
# as `/v1/batches` does for OpenAI's create; each still carries Relay's stable `code`.
_SHAPED_PATHS = ("/v1/files", "/openai/v1/files", "/openai/v1/batches", "/v1/messages/batches",
                 "/anthropic/v1/messages/batches", "/v1/batches")
_SHAPED_ANSWER = {"description": "error", "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/ShapedError"}}}}


class RelayApi(Api):  # type: ignore[misc]
    """flask-smorest's Api with Relay's error body (`{"error": {"code", "message", "details"?}}`) documented for
    every error status and as every operation's `default` answer."""

    ERROR_SCHEMA = RelayErrorSchema


class ErrorAnswers(BasePlugin):
    """Adds to each operation the error statuses its kind of route really gives, unless the route documents its
    own: 400 for anything with arguments or a body, 401 behind a credential, 404 for an id in the path, 413 for a
    body (every body has a size limit), and no 422; a create taking `Idempotency-Key` gets the header and a 409."""

    def operation_helper(self, path: str | None = None, operations: dict[str, Any] | None = None,
                         **kwargs: Any) -> None:
        shaped = (path or "").startswith(_SHAPED_PATHS)
        for operation in (operations or {}).values():
            responses = operation.setdefault("responses", {})
            had_422 = responses.pop(422, None) is not None or responses.pop("422", None) is not None
            if operation.pop(DOC_MARK, False):  # a create taking Idempotency-Key (app/api/idempotency.py)
                operation.setdefault("parameters", []).append(PARAMETER)
                if 409 not in responses and "409" not in responses:  # the creates' paths are all shaped
                    responses[409] = _SHAPED_ANSWER
            for status in _statuses(path or "", operation, had_422):
                if status not in responses and str(status) not in responses:
                    responses[status] = _SHAPED_ANSWER if shaped else _COMPONENTS[status]
            if shaped:  # every answer but a success is in the provider's shape, 401 included
                responses["default"] = _SHAPED_ANSWER


def _statuses(path: str, operation: dict[str, Any], had_422: bool) -> list[int]:
    statuses = []
    has_body = "requestBody" in operation
    if had_422 or has_body or operation.get("parameters"):
        statuses.append(400)
    if operation.get("security"):
        statuses.append(401)
    if "{" in path:
        statuses.append(404)
    if has_body:
        statuses.append(413)
    return statuses


def error_answers(bp: Blueprint, *statuses: int, schema: Any = RelayErrorSchema) -> Any:
    """Document error STATUSES of a view, each answered with SCHEMA (Relay's error body by default)."""
    def decorate(func: Any) -> Any:
        return with_docs(func, *(bp.alt_response(status, schema=schema, description="error")
                                  for status in sorted(set(statuses))))
    return decorate


def with_docs(func: F, *decorators: Callable[[Any], Any]) -> F:
    """FUNC with the documentation flask-smorest's DECORATORS (`alt_response`, `doc`) give a view, without their
    wrappers: each wrapper is one more call through `ensure_sync` on every request (a live route had ten)."""
    wrapped: Any = func
    for decorate in decorators:
        wrapped = decorate(wrapped)
    func._apidoc = wrapped._apidoc  # type: ignore[attr-defined]  # where flask-smorest reads a view's documentation
    return func


def build_api(app: Any) -> RelayApi:
    """The Api of APP, with the error answers plugin."""
    api = RelayApi(app, spec_kwargs={"extra_plugins": [ErrorAnswers()]})
    api.spec.components.schema("ShapedError", schema=ShapedErrorSchema)
    return api
