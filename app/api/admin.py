"""Admin API (catalog): apply / export the whole catalog, list each kind, enable / disable / delete policies.

Every /admin route needs `Authorization: Bearer $RELAY_ADMIN_TOKEN` (compared in constant time).
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import current_app, request
from flask.typing import ResponseReturnValue
from flask_smorest import Api, Blueprint
from marshmallow import RAISE

from app.api.bodies import json_text
from app.api.openapi import error_answers
from app.batches.validation import STRICT_JSON, json_depth, json_problem
from app.catalog.apply import apply_catalog
from app.catalog.export import read_catalog
from app.catalog.service import delete_policy, get_policy_document, list_kind, set_policy_enabled
from app.catalog.validate import parse_document
from app.credentials.errors import InvalidCredential, MissingCredential
from app.errors import BadRequest, ValidationFailed
from app.runtime import Runtime
from schemas.admin import ApplyQuerySchema
from schemas.catalog import (
    ApplyResultSchema,
    CatalogSchema,
    HostSchema,
    ModelSchema,
    PolicySchema,
    PrincipalSchema,
    ProjectSchema,
    TeamSchema,
)

CATALOG_MAX_BYTES = 16 * 1024 * 1024
ADMIN_MAX_BYTES = 256 * 1024
MAX_JSON_DEPTH = 64  # admin bodies are flat records; nothing legitimate nests this deep
SECURITY: list[dict[str, list[str]]] = [{"adminToken": []}]

blp = Blueprint("admin", __name__, url_prefix="/admin", description="Catalog administration (admin token)")


def register(api: Api) -> None:
    """Register the admin blueprints and the admin token's security scheme in the OpenAPI document."""
    from app.api import admin_batches, admin_credentials

    api.spec.components.security_scheme("adminToken", {"type": "http", "scheme": "bearer",
                                                       "description": "RELAY_ADMIN_TOKEN"})
    api.register_blueprint(blp)
    api.register_blueprint(admin_credentials.blp)
    api.register_blueprint(admin_batches.blp)


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
    (json.loads raises RecursionError, not ValueError, on deeply nested input, here or, for a depth that decodes
    here, in the parser's deeper stack), or holding what strict JSON refuses (raw surrogate bytes, NaN, an
    integer of more than 4,300 digits)."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        return  # no body: the argument parser decides whether one is needed
    try:
        body = STRICT_JSON.decode(json_text(raw))
    except RecursionError as exc:
        raise ValidationFailed(message="the JSON body is nested too deeply") from exc
    except ValueError as exc:
        raise BadRequest("invalid_json", f"the request body is not valid JSON: {json_problem(exc)}") from None
    if json_depth(body) > MAX_JSON_DEPTH:
        raise ValidationFailed(message=f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep")


blp.before_request(require_admin)


def runtime() -> Runtime:
    """This process's Runtime."""
    rt: Runtime = current_app.extensions["relay"]
    return rt


def documented(bp: Blueprint, summary: str, *statuses: int) -> Any:
    """OpenAPI summary, the admin security requirement, and the error answers (always 400 and 401)."""
    def decorate(func: Any) -> Any:
        return bp.doc(summary=summary, security=SECURITY)(error_answers(bp, 400, 401, *statuses)(func))
    return decorate


@blp.route("/catalog", methods=["PUT"])
@documented(blp, "Apply a whole catalog (JSON or YAML); 400 lists every problem with its path", 413)
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": CatalogSchema},
                                                      "application/yaml": {"schema": CatalogSchema}}})
@blp.arguments(ApplyQuerySchema, location="query", unknown=RAISE)
@blp.response(200, ApplyResultSchema)
def put_catalog(query: dict[str, Any]) -> ResponseReturnValue:
    # JSON when the body says so; YAML (a superset of JSON) for application/yaml and anything else.
    fmt = "json" if request.mimetype == "application/json" or request.mimetype.endswith("+json") else "yaml"
    raw = parse_document(request.get_data(cache=False), fmt)
    return apply_catalog(runtime(), raw, dry_run=query["dry_run"]).to_dict()


@blp.route("/catalog", methods=["GET"])
@documented(blp, "The whole catalog in the file format, without secret values")
@blp.response(200, CatalogSchema)
def get_catalog_document() -> ResponseReturnValue:
    return read_catalog(runtime())


def _list_route(kind: str, schema: type, summary: str) -> None:
    @documented(blp, summary)
    @blp.response(200, schema(many=True))
    def view() -> ResponseReturnValue:
        return list_kind(runtime(), kind)

    view.__name__ = f"list_{kind}"
    blp.route(f"/{kind.replace('_', '-')}", methods=["GET"], endpoint=f"list_{kind}")(view)


_list_route("hosts", HostSchema, "Hosts and their keys (names and value_env only, never a value)")
_list_route("models", ModelSchema, "Models and their bindings")
_list_route("policies", PolicySchema, "Live policies (deleted ones are not listed)")
_list_route("teams", TeamSchema, "Teams")
_list_route("projects", ProjectSchema, "Projects")
_list_route("users", PrincipalSchema, "Users")
_list_route("service_accounts", PrincipalSchema, "Service accounts")


@blp.route("/policies/<string:name>", methods=["GET"])
@documented(blp, "One live policy", 404)
@blp.response(200, PolicySchema)
def get_policy_route(name: str) -> ResponseReturnValue:
    return get_policy_document(runtime(), name)


@blp.route("/policies/<string:name>/disable", methods=["POST"])
@documented(blp, "Disable a policy (requests under it are refused until it is enabled)", 404)
@blp.response(200, PolicySchema)
def disable_policy(name: str) -> ResponseReturnValue:
    return set_policy_enabled(runtime(), name, False)


@blp.route("/policies/<string:name>/enable", methods=["POST"])
@documented(blp, "Enable a policy", 404)
@blp.response(200, PolicySchema)
def enable_policy(name: str) -> ResponseReturnValue:
    return set_policy_enabled(runtime(), name, True)


@blp.route("/policies/<string:name>", methods=["DELETE"])
@documented(blp, "Delete a policy (soft: batches and usage keep referring to it)", 404)
@blp.response(204)
def delete_policy_route(name: str) -> ResponseReturnValue:
    delete_policy(runtime(), name)
    return ""
