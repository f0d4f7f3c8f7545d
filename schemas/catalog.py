"""The catalog document (`relay apply FILE`, `PUT /admin/catalog`, `GET /admin/catalog`) as marshmallow schemas."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from schemas.durations import DurationError, format_duration, parse_duration
from schemas.shapes import RegisteredShape
from schemas.webhooks import EVENT_TYPES, check_secret, check_url

KEY_SELECTIONS = ("prioritized", "round_robin", "least_recently_used")
MAX_ITEMS = 10_000
MAX_COUNT = 10**15  # requests or tokens per window (bigint columns)
MAX_WINDOW_S = 366 * 86_400

# Names appear in URLs (/admin/policies/{name}); model names may also carry `/` and `:` as upstream names do.
NAME = validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,199}$",
                       error="must be 1-200 letters, digits or . _ @ + - (starting with a letter or digit)")
MODEL_NAME = validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$",
                             error="must be 1-200 letters, digits or . _ : / @ + - (starting with a letter or digit)")
# Control characters, and unpaired surrogates (JSON may escape them; no text column can store one).
PRINTABLE = validate.Regexp(r"^[^\x00-\x1f\x7f\ud800-\udfff]*$",
                            error="must not contain control characters or unpaired surrogates")
ENV_NAME = validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$", error="must be an environment variable name")
GRANT = validate.Regexp(r"^[A-Za-z0-9*?._:/@+\[\]-]{1,200}$", error="must be a model name or a * wildcard")


class StrictBoolean(fields.Boolean):
    """true or false only (no "yes", 1 or "on" from JSON)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(truthy={True}, falsy={False}, **kwargs)


class Duration(fields.Field):
    """Seconds, written as `30s`, `1m`, `24h` or a plain number of seconds."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise ValidationError(str(exc)) from exc

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else format_duration(float(value))


class Price(fields.Decimal):
    """A non-negative price per million tokens: exact on input, a JSON number on output."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validate=validate.Range(min=0, max=1_000_000), **kwargs)

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return None if value is None else float(Decimal(value))


def _whole_seconds(value: float) -> None:
    if value < 1 or value != int(value) or value > MAX_WINDOW_S:
        raise ValidationError("must be a whole number of seconds, from 1s to 366d")


class HostKeySchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    value = fields.String(load_only=True, validate=[validate.Length(min=1, max=10_000), PRINTABLE],
                          metadata={"description": "the secret, stored encrypted; never returned"})
    value_env = fields.String(validate=ENV_NAME,
                              metadata={"description": "environment variable read at apply time"})
    enabled = StrictBoolean(load_default=True)

    @validates_schema
    def _one_source(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "value" in data and "value_env" in data:
            raise ValidationError("give value or value_env, not both")


class HostSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    base_url = fields.String(required=True, validate=[validate.Length(min=1, max=2000), PRINTABLE],
                             metadata={"description": "http(s) URL; ${VAR} and ${VAR:-default} are expanded"})
    enabled = StrictBoolean(load_default=True)
    keys = fields.List(fields.Nested(HostKeySchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))


class PricingSchema(Schema):
    input_per_mtok = Price(required=True)
    output_per_mtok = Price(required=True)
    cached_input_per_mtok = Price(allow_none=True)


class BindingSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    host = fields.String(required=True, validate=NAME)
    adapter = fields.String(required=True, validate=RegisteredShape(error="must be one of {choices}"))
    upstream_model = fields.String(required=True, validate=[validate.Length(min=1, max=500), PRINTABLE])
    pricing = fields.Nested(PricingSchema, allow_none=True)
    enabled = StrictBoolean(load_default=True)


class ModelSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=MODEL_NAME)
    enabled = StrictBoolean(load_default=True)
    max_output_tokens = fields.Integer(strict=True, load_default=None, allow_none=True,
                                       validate=validate.Range(min=1, max=100_000_000), metadata={
        "description": "the most output tokens a call answers when its request sets no limit (the provider's default"
                       " maximum); the batch estimate's bound for such items (unset: their cost has no upper bound)"})
    bindings = fields.List(fields.Nested(BindingSchema), required=True, validate=validate.Length(min=1, max=100))


class RateLimitSchema(Schema):
    requests = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=MAX_COUNT))
    tokens = fields.Integer(strict=True, allow_none=True, validate=validate.Range(min=1, max=MAX_COUNT))
    per = Duration(required=True, validate=_whole_seconds)

    @validates_schema
    def _something_limited(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data.get("requests") is None and data.get("tokens") is None:
            raise ValidationError("give requests, tokens or both")


class CircuitBreakerSchema(Schema):
    failures = fields.Integer(strict=True, load_default=5, validate=validate.Range(min=1, max=10_000))
    cooldown = Duration(load_default=30.0, validate=validate.Range(min=0, max=86_400))


class BatchPacingSchema(Schema):
    """How a policy's batch items share its rate limits with live calls (docs/batches.md, "Pacing")."""

    pace = StrictBoolean(load_default=False, metadata={
        "description": "start batch items only within the limits' budget (they wait) instead of discarding them"})
    share = fields.Float(load_default=1.0, allow_nan=False,
                         validate=validate.Range(min=0.01, max=1.0, error="must be from 0.01 to 1"),
                         metadata={"description": "fraction of each rate limit batch items may use; the rest is "
                                                  "kept for live calls"})


class PolicySchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    enabled = StrictBoolean(load_default=True)
    models = fields.List(fields.String(validate=GRANT), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    rate_limits = fields.List(fields.Nested(RateLimitSchema), load_default=list, validate=validate.Length(max=100))
    key_pool = fields.List(fields.String(validate=NAME), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    key_selection = fields.String(load_default="prioritized",
                                  validate=validate.OneOf(KEY_SELECTIONS, error="must be one of {choices}"))
    circuit_breaker = fields.Nested(CircuitBreakerSchema, load_default=lambda: {"failures": 5, "cooldown": 30.0})
    payload_logging = StrictBoolean(load_default=False)
    batch_weight = fields.Float(load_default=1.0, allow_nan=False,
                                validate=validate.Range(min=0.01, max=1000, error="must be from 0.01 to 1000"),
                                metadata={"description": "share of the batch workers relative to other owners"})
    batch = fields.Nested(BatchPacingSchema, load_default=lambda: {"pace": False, "share": 1.0})


class WebhookSchema(Schema):
    """An endpoint that receives the events of the batches of its project or team (matched by position)."""

    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    url = fields.String(required=True, validate=check_url, metadata={"description": "http(s) URL"})
    secret = fields.String(load_only=True, validate=check_secret,
                           metadata={"description": "whsec_<base64>: signs events; stored encrypted, never returned"})
    secret_env = fields.String(validate=ENV_NAME, metadata={"description": "environment variable read at apply time"})
    previous_secret = fields.String(load_only=True, validate=check_secret, metadata={
        "description": "during a rotation: the old secret, which also signs until it is removed"})
    previous_secret_env = fields.String(validate=ENV_NAME)
    events = fields.List(fields.String(validate=validate.OneOf(EVENT_TYPES, error="must be one of {choices}")),
                         load_default=list, validate=validate.Length(max=len(EVENT_TYPES)),
                         metadata={"description": "the event types it receives; empty: all"})

    @validates_schema
    def _one_source_each(self, data: dict[str, Any], **kwargs: Any) -> None:
        for name in ("secret", "previous_secret"):
            if name in data and f"{name}_env" in data:
                raise ValidationError(f"give {name} or {name}_env, not both")
        if ("previous_secret" in data or "previous_secret_env" in data) and not (
                "secret" in data or "secret_env" in data):
            raise ValidationError("a previous secret needs the new one: give secret or secret_env too")


WEBHOOKS: dict[str, Any] = {"load_default": list, "validate": validate.Length(max=20),
            "metadata": {"description": "endpoints receiving an event when a batch of it ends"}}


class TeamSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    webhooks = fields.List(fields.Nested(WebhookSchema), **WEBHOOKS)


class ProjectSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    team = fields.String(allow_none=True, validate=NAME)
    webhooks = fields.List(fields.Nested(WebhookSchema), **WEBHOOKS)


class PrincipalSchema(Schema):
    id = fields.UUID(dump_only=True, metadata={"description": "in admin listings only"})
    name = fields.String(required=True, validate=NAME)
    policy = fields.String(required=True, validate=NAME)
    project = fields.String(allow_none=True, validate=NAME)
    team = fields.String(allow_none=True, validate=NAME,
                         metadata={"description": "defaults to the project's team"})


class CatalogSchema(Schema):
    """A whole catalog; anything absent from it is removed when it is applied."""

    hosts = fields.List(fields.Nested(HostSchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    models = fields.List(fields.Nested(ModelSchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    policies = fields.List(fields.Nested(PolicySchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    teams = fields.List(fields.Nested(TeamSchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    projects = fields.List(fields.Nested(ProjectSchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    users = fields.List(fields.Nested(PrincipalSchema), load_default=list, validate=validate.Length(max=MAX_ITEMS))
    service_accounts = fields.List(fields.Nested(PrincipalSchema), load_default=list,
                                   validate=validate.Length(max=MAX_ITEMS))


class KindChangesSchema(Schema):
    created = fields.List(fields.String())
    updated = fields.List(fields.String())
    deleted = fields.List(fields.String())


class ApplyResultSchema(Schema):
    """What applying a catalog changed, by kind."""

    changed = fields.Boolean(required=True)
    dry_run = fields.Boolean(required=True)
    version = fields.Integer(required=True, metadata={"description": "catalog version after the apply"})
    changes = fields.Dict(keys=fields.String(), values=fields.Nested(KindChangesSchema), required=True)
