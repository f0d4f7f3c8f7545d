"""Admin API request and response bodies (relay keys, tokens, policies, errors)."""

from __future__ import annotations

from datetime import UTC, datetime

from marshmallow import Schema, ValidationError, fields, validate

from schemas.catalog import NAME, PRINTABLE

PRINCIPAL_KINDS = ("user", "service_account")
KEY_STATES = ("active", "disabled", "revoked", "expired", "policy_deleted", "policy_disabled")


class ErrorBodySchema(Schema):
    code = fields.String(required=True, metadata={"description": "stable machine-readable code"})
    message = fields.String(required=True)
    details = fields.Raw(metadata={"description": "per-field messages, or the catalog's problems"})


class RelayErrorSchema(Schema):
    """The body of every error answer."""

    error = fields.Nested(ErrorBodySchema, required=True)


LATEST_EXPIRY = datetime(9999, 1, 1, tzinfo=UTC)  # later times do not survive a round trip through every time zone


def before_latest_expiry(value: datetime) -> None:
    """A time Python and Postgres can both hold in any time zone: before 9999-01-01T00:00:00Z."""
    try:
        in_range = value.astimezone(UTC) < LATEST_EXPIRY
    except OverflowError:
        in_range = False
    if not in_range:
        raise ValidationError("must be before 9999-01-01T00:00:00Z")


class RelayKeyCreateSchema(Schema):
    principal_kind = fields.String(required=True, validate=validate.OneOf(PRINCIPAL_KINDS))
    principal = fields.String(required=True, validate=NAME)
    policy = fields.String(required=True, validate=NAME)
    project = fields.String(validate=NAME, metadata={"description": "defaults to the principal's"})
    team = fields.String(validate=NAME, metadata={"description": "defaults to the principal's"})
    name = fields.String(validate=[validate.Length(max=200), PRINTABLE])
    expires_at = fields.AwareDateTime(validate=before_latest_expiry,
                                      metadata={"description": "RFC 3339, with a timezone; before the year 9999"})


class RelayKeyRotateSchema(Schema):
    grace_seconds = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=30 * 86_400),
                                   metadata={"description": "how long the old value keeps working (default 0)"})


class _KeyFields(Schema):
    id = fields.UUID(required=True)
    prefix = fields.String(required=True, metadata={"description": "the first characters of the current value"})
    policy = fields.String(required=True)
    project = fields.String(allow_none=True)
    team = fields.String(allow_none=True)
    principal_kind = fields.String(required=True, validate=validate.OneOf(PRINCIPAL_KINDS))
    principal = fields.String(allow_none=True, metadata={"description": "null when removed from the catalog"})
    expires_at = fields.DateTime(allow_none=True)
    state = fields.String(required=True, validate=validate.OneOf(KEY_STATES), metadata={
        "description": "the key's own state; an active key whose policy is deleted or disabled shows policy_deleted"
                       " or policy_disabled (re-applying a policy of the same name brings a deleted one back)"})


class RelayKeySecretSchema(_KeyFields):
    """A relay key with its secret: the only time the secret is shown."""

    key = fields.String(required=True, metadata={"description": "the secret; shown this once"})


class RelayKeySchema(_KeyFields):
    """A relay key, never its secret."""

    name = fields.String(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


class TokenMintSchema(Schema):
    user = fields.String(required=True, validate=NAME)
    ttl_seconds = fields.Integer(strict=True, required=True, validate=validate.Range(min=1, max=366 * 86_400))


class MintedTokenSchema(Schema):
    """A freshly minted token: the only time the token text is shown."""

    id = fields.UUID(required=True)
    token = fields.String(required=True)
    user = fields.String(required=True)
    expires_at = fields.DateTime(required=True)


class TokenSchema(Schema):
    """An inference token, never the token text."""

    id = fields.UUID(required=True)
    user = fields.String(required=True)
    expires_at = fields.DateTime(required=True)
    revoked_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    state = fields.String(validate=validate.OneOf(("active", "revoked", "expired")))


class TokenListQuerySchema(Schema):
    user = fields.String(validate=NAME, metadata={"description": "only this user's tokens"})


class ApplyQuerySchema(Schema):
    dry_run = fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                            metadata={"description": "validate and report the changes without making them"})
