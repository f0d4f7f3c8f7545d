"""What every /admin route shares: the admin token check (constant time) with the body limits, this process's
Runtime, and the OpenAPI decoration of an admin route."""

from __future__ import annotations

import hmac
from typing import Any

from flask import current_app, request
from flask_smorest import Blueprint

from app.api.bodies import json_text, json_value
from app.api.openapi import error_answers, with_docs
from app.batches.validation import json_depth
from app.credentials.errors import InvalidCredential, MissingCredential
from app.errors import ValidationFailed
from app.runtime import Runtime

CATALOG_MAX_BYTES = 16 * 1024 * 1024
ADMIN_MAX_BYTES = 256 * 1024
MAX_JSON_DEPTH = 64  # admin bodies are flat records; nothing legitimate nests this deep
SECURITY: list[dict[str, list[str]]] = [{"adminToken": []}]


def require_admin() -> None:
    """Before every admin request: check the admin token, then cap the body size."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise MissingCredential(message="send `Authorization: Bearer <RELAY_ADMIN_TOKEN>`")
    expected = runtime().settings.admin_token.encode()
    if not hmac.compare_digest(token.strip().encode("utf-8", "replace"), expected):
        raise InvalidCredential(message="invalid admin token")
    is_catalog = request.path.rstrip("/") == "/admin/catalog"
    request.max_content_length = CATALOG_MAX_BYTES if is_catalog else ADMIN_MAX_BYTES
    if is_catalog:
        return
    if request.is_json:
        _refuse_bad_json()
    elif request.content_length or request.headers.get("Transfer-Encoding"):
        # The argument parser reads JSON only: any other body would be ignored, and a rotation sent as
        # text/plain would silently lose its grace period. (400 like every other body these routes refuse.)
        raise ValidationFailed(message="send the body as application/json")


def _refuse_bad_json() -> None:
    """Answer 400, not 500, for JSON the argument parser would choke on: nested deeper than MAX_JSON_DEPTH
    (the decoder's own limit is refused by json_value; a depth that decodes here may still exhaust the parser's
    deeper stack), or holding what strict JSON refuses (raw surrogate bytes, NaN, an
    integer of more than 4,300 digits)."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        return  # no body: the argument parser decides whether one is needed
    body = json_value(json_text(raw))
    if json_depth(body) > MAX_JSON_DEPTH:
        raise ValidationFailed(message=f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep")


def runtime() -> Runtime:
    """This process's Runtime."""
    rt: Runtime = current_app.extensions["relay"]
    return rt


def documented(bp: Blueprint, summary: str, *statuses: int) -> Any:
    """OpenAPI summary, the admin security requirement, and the error answers (always 400 and 401)."""
    def decorate(func: Any) -> Any:
        return with_docs(error_answers(bp, 400, 401, *statuses)(func), bp.doc(summary=summary, security=SECURITY))
    return decorate
