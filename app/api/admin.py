"""Admin API (catalog): apply / export the whole catalog, list each kind, enable / disable / delete policies.

Every /admin route needs `Authorization: Bearer $RELAY_ADMIN_TOKEN` (compared in constant time).
"""

from __future__ import annotations

from typing import Any

from flask import request
from flask.typing import ResponseReturnValue
from flask_smorest import Api, Blueprint
from marshmallow import RAISE

from app.api import admin_batches, admin_credentials, admin_webhooks
from app.api.admin_auth import documented, require_admin, runtime
from app.catalog.apply import apply_catalog
from app.catalog.export import read_catalog
from app.catalog.service import delete_policy, get_policy_document, list_kind, set_policy_enabled
from app.catalog.validate import parse_document
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

blp = Blueprint("admin", __name__, url_prefix="/admin", description="Catalog administration (admin token)")


def register(api: Api) -> None:
    """Register the admin blueprints and the admin token's security scheme in the OpenAPI document."""
    api.spec.components.security_scheme("adminToken", {"type": "http", "scheme": "bearer",
                                                       "description": "RELAY_ADMIN_TOKEN"})
    api.register_blueprint(blp)
    api.register_blueprint(admin_credentials.blp)
    api.register_blueprint(admin_batches.blp)
    admin_webhooks.register(api)


blp.before_request(require_admin)


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
