"""Admin API (credentials): relay keys and inference tokens. Secrets appear once, in the create/rotate/mint answer."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint
from marshmallow import RAISE

from app.api.admin_auth import documented, require_admin, runtime
from app.credentials import keys, tokens
from schemas.admin import (
    MintedTokenSchema,
    RelayKeyCreateSchema,
    RelayKeyRotateSchema,
    RelayKeySchema,
    RelayKeySecretSchema,
    TokenListQuerySchema,
    TokenMintSchema,
    TokenSchema,
)

blp = Blueprint("admin-credentials", __name__, url_prefix="/admin",
                description="Relay keys and inference tokens (admin token)")
blp.before_request(require_admin)


@blp.route("/relay-keys", methods=["POST"])
@documented(blp, "Create a relay key; the answer carries its secret, shown this once")
@blp.arguments(RelayKeyCreateSchema)
@blp.response(201, RelayKeySecretSchema)
def create_relay_key(body: dict[str, Any]) -> ResponseReturnValue:
    issued = keys.create_key(runtime(), **body)
    return _with_secret(issued)


@blp.route("/relay-keys", methods=["GET"])
@documented(blp, "Every relay key (never a secret)")
@blp.response(200, RelayKeySchema(many=True))
def list_relay_keys() -> ResponseReturnValue:
    return [keys.key_fields(view) for view in keys.list_keys(runtime())]


@blp.route("/relay-keys/<uuid:key_id>", methods=["GET"])
@documented(blp, "One relay key", 404)
@blp.response(200, RelayKeySchema)
def get_relay_key(key_id: UUID) -> ResponseReturnValue:
    return keys.key_fields(keys.get_key(runtime(), key_id))


@blp.route("/relay-keys/<uuid:key_id>/rotate", methods=["POST"])
@documented(blp, "Give the key a new secret; the old one keeps working for grace_seconds (default 0)", 404, 409)
@blp.arguments(RelayKeyRotateSchema, required=False)
@blp.response(200, RelayKeySecretSchema)
def rotate_relay_key(body: dict[str, Any], key_id: UUID) -> ResponseReturnValue:
    return _with_secret(keys.rotate_key(runtime(), key_id, body["grace_seconds"]))


def _state_route(action: str, summary: str) -> None:
    @documented(blp, summary, 404, 409)
    @blp.response(200, RelayKeySchema)
    def view(key_id: UUID) -> ResponseReturnValue:
        return keys.key_fields(keys.change_key_state(runtime(), key_id, action))

    view.__name__ = f"{action}_relay_key"
    blp.route(f"/relay-keys/<uuid:key_id>/{action}", methods=["POST"], endpoint=view.__name__)(view)


_state_route("disable", "Disable a relay key (enable undoes it)")
_state_route("enable", "Enable a disabled relay key")
_state_route("revoke", "Revoke a relay key, for good")


@blp.route("/tokens", methods=["POST"])
@documented(blp, "Mint an inference token for a user; the answer carries the token, shown this once")
@blp.arguments(TokenMintSchema)
@blp.response(201, MintedTokenSchema)
def mint_token(body: dict[str, Any]) -> ResponseReturnValue:
    issued = tokens.mint_token(runtime(), body["user"], body["ttl_seconds"])
    return {**tokens.token_fields(issued.view), "token": issued.token}


@blp.route("/tokens", methods=["GET"])
@documented(blp, "Inference tokens (never the token text)")
@blp.arguments(TokenListQuerySchema, location="query", unknown=RAISE)
@blp.response(200, TokenSchema(many=True))
def list_tokens(query: dict[str, Any]) -> ResponseReturnValue:
    return [tokens.token_fields(view) for view in tokens.list_tokens(runtime(), query.get("user"))]


@blp.route("/tokens/<uuid:token_id>/revoke", methods=["POST"])
@documented(blp, "Revoke one inference token", 404)
@blp.response(200, TokenSchema)
def revoke_token(token_id: UUID) -> ResponseReturnValue:
    return tokens.token_fields(tokens.revoke_token(runtime(), token_id))


def _with_secret(issued: keys.IssuedKey) -> dict[str, Any]:
    return {**keys.key_fields(issued.view), "key": issued.secret}
