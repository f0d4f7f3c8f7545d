"""Live inference routes: OpenAI, Anthropic and Responses shapes, embeddings, canonical /v1/generate, models.

Every route answers under /v1, /openai/v1 and /anthropic/v1 so official SDKs work with either base URL style.
Errors come back in the caller's shape (OpenAI or Anthropic error objects) with a stable code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, current_app, g, request
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint

from app.access.cache import get_catalog
from app.api.bodies import decode_object, json_text, read_body, require_json
from app.api.callers import request_caller
from app.api.inference_errors import shaped_error, shaped_headers
from app.api.openapi import error_answers, with_docs
from app.batches.validation import SURROGATE_ESCAPE, text_problem
from app.errors import (
    PayloadTooLarge,
    RelayError,
    ValidationFailed,
)
from app.pipeline import run_inference
from app.pipeline.types import InferenceCall, InferenceResult
from app.runtime import Runtime
from schemas.inference import ShapedErrorSchema

blp = Blueprint("inference", __name__, description="Live inference (OpenAI- and Anthropic-compatible)")

PREFIXES = ("/v1", "/openai/v1", "/anthropic/v1")
ROUTES = {  # path → request shape
    "/chat/completions": "openai",
    "/messages": "anthropic",
    "/responses": "openai_responses",
    "/embeddings": "embeddings",
    "/generate": "canonical",
}


def _runtime() -> Runtime:
    return current_app.extensions["relay"]  # type: ignore[no-any-return]


def json_body() -> dict[str, Any]:
    """The request body as a JSON object, or a 4xx naming what is wrong with it."""
    require_json()
    text = json_text(read_body(_runtime().settings.max_request_bytes, _too_large))
    body = decode_object(text)
    problem = text_problem(body.get("model"))
    if problem is None and SURROGATE_ESCAPE.search(text):
        problem = text_problem(body, nul=False)
    if problem is not None:
        raise ValidationFailed(message=f"the request holds text that cannot be sent upstream: {problem}")
    return body


def _too_large(limit: int) -> RelayError:
    return PayloadTooLarge(message=f"a request body holds at most {limit} bytes")


def _validate(shape: str, body: dict[str, Any]) -> None:
    if shape == "canonical":
        from adapters.canonical import validate_canonical

        errors = validate_canonical(body)
    else:
        from adapters import get_adapter

        errors = get_adapter(shape).validate_request(body)
    if errors:
        details = [{"field": e.field, "message": e.message} for e in errors]
        raise ValidationFailed(message="; ".join(f"{e.field}: {e.message}" for e in errors),
                               details=details)


def _respond(shape: str, result: InferenceResult) -> Response:
    headers = list(shaped_headers(shape, result.headers).items())  # given whole: each set would scan the others
    if result.stream is not None:
        headers += [("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]
        return Response(result.stream, status=result.status, mimetype="text/event-stream", headers=headers)
    return Response(result.body or b"", status=result.status, content_type=result.content_type, headers=headers)


def _inference_view(shape: str, route: str) -> Callable[[], ResponseReturnValue]:
    def view() -> ResponseReturnValue:
        try:
            caller = request_caller()
            body = json_body()
            _validate(shape, body)
            call = InferenceCall(shape=shape, body=body, caller=caller, policy_id=caller.policy_id,
                                 source="live", request_id=g.request_id, route=route)
            return _respond(shape, run_inference(_runtime(), call))
        except RelayError as exc:
            return shaped_error(shape, exc)

    view.__name__ = f"infer_{shape}"
    view.__doc__ = f"{route}: an inference request of shape {shape}"
    return view


def _models_view(anthropic_prefix: bool) -> Callable[[], ResponseReturnValue]:
    def view() -> ResponseReturnValue:
        # Anthropic's SDK calls /v1/models too (its base URL has no /anthropic): its `anthropic-version` tells it
        anthropic = anthropic_prefix or "anthropic-version" in request.headers
        try:
            caller = request_caller()
        except RelayError as exc:
            return shaped_error("anthropic" if anthropic else "openai", exc)
        snapshot = get_catalog(_runtime()).snapshot()
        policy = snapshot.policies.get(caller.policy_id)
        names = sorted(n for n, m in snapshot.models.items() if m.enabled and policy is not None and policy.grants(n))
        if anthropic:
            data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z",
                     "lifecycle": "active"} for n in names]  # only enabled models are listed
            return {"data": data, "has_more": False, "first_id": names[0] if names else None,
                    "last_id": names[-1] if names else None}
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "relay"}
                                           for n in names]}

    view.__name__ = "models_anthropic" if anthropic_prefix else "models_openai"
    view.__doc__ = "The models the caller's policy grants"
    return view


_ANSWER = {"description": "the upstream's answer in the route's shape (server-sent events with `stream: true`)",
           "content": {"application/json": {"schema": {"type": "object"}},
                       "text/event-stream": {"schema": {"type": "string"}}}}
_PASSED_THROUGH = {"description": "an upstream's non-retryable answer, passed through as it is",
                   "content": {"application/json": {"schema": {}}}}
_INFERENCE_DOC = {"security": [{"relayCredential": []}], "responses": {"200": _ANSWER, "default": _PASSED_THROUGH},
                  "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}
# 403 model_not_allowed, 404 model_not_found, 429 rate_limited, 502 all_keys_failed, 503 no_binding / no key
_INFERENCE_ERRORS = (400, 401, 403, 404, 413, 415, 429, 502, 503)


def _register() -> None:
    for prefix in PREFIXES:
        for path, shape in ROUTES.items():
            route = prefix + path
            view = error_answers(blp, *_INFERENCE_ERRORS, schema=ShapedErrorSchema)(_inference_view(shape, route))
            blp.add_url_rule(route, endpoint=f"{shape}{prefix.replace('/', '_')}",
                             view_func=with_docs(view, blp.doc(**_INFERENCE_DOC)), methods=["POST"])
        models = error_answers(blp, 401, schema=ShapedErrorSchema)(_models_view(prefix.startswith("/anthropic")))
        models = with_docs(models, blp.doc(security=_INFERENCE_DOC["security"], responses={"200": {
            "description": "the models the caller's policy grants", "content": {
                "application/json": {"schema": {"type": "object"}}}}}))
        blp.add_url_rule(prefix + "/models", endpoint=f"models{prefix.replace('/', '_')}", view_func=models,
                         methods=["GET"])


_register()
