"""The usage API's query arguments and responses (`/v1/usage/events`, `/summary`, `/events/export`)."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate, validates_schema

from schemas.batch_ids import BatchIdField
from schemas.catalog import PRINTABLE

SOURCES = ("live", "batch")
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
GROUP_BYS = ("source", "model", "host", "policy", "project", "team", "principal", "credential", "batch")
BUCKETS = ("hour", "day")
EXPORT_FORMATS = ("csv", "jsonl")
MAX_LIMIT = 1000


class CommaList(fields.String):
    """A comma-separated list of CHOICES (`a,b`); order kept, duplicates dropped. A string in OpenAPI."""

    def __init__(self, choices: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.choices = choices

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        text = super()._deserialize(value, attr, data, **kwargs)
        names = [p.strip() for p in text.split(",") if p.strip()]
        unknown = [n for n in names if n not in self.choices]
        if unknown:
            raise ValidationError(f"unknown: {', '.join(unknown)}; choose from {', '.join(self.choices)}")
        return list(dict.fromkeys(names))


_NAME_OR_ID = "a name or an id"


def _text(longest: int) -> list[Any]:
    """1..LONGEST characters and no control character (Postgres text cannot hold a NUL: it would fail the query)."""
    return [validate.Length(1, longest), PRINTABLE]


class UsageFilterArgs(Schema):
    """Filters shared by every usage route; all optional and combined with AND."""

    class Meta:
        unknown = RAISE

    source = fields.String(validate=validate.OneOf(SOURCES), metadata={"description": "live or batch"})
    from_ = fields.AwareDateTime(data_key="from", format="iso",
                                 metadata={"description": "RFC 3339 time, inclusive (event created_at)"})
    to = fields.AwareDateTime(format="iso", metadata={"description": "RFC 3339 time, exclusive"})
    model = fields.String(validate=_text(200), metadata={"description": "model name as requested"})
    host = fields.String(validate=_text(200), metadata={"description": f"host: {_NAME_OR_ID}"})
    policy = fields.String(validate=_text(200), metadata={"description": f"policy: {_NAME_OR_ID}"})
    project = fields.String(validate=_text(200), metadata={"description": f"project: {_NAME_OR_ID}"})
    team = fields.String(validate=_text(200), metadata={"description": f"team: {_NAME_OR_ID}"})
    principal = fields.String(validate=_text(240), metadata={
        "description": "user or service account: a name or id, optionally prefixed `user:` or `service_account:`"})
    credential = fields.UUID(metadata={"description": "relay key id or inference token id"})
    batch_id = BatchIdField()
    status = fields.String(validate=validate.OneOf(STATUS_CLASSES), metadata={"description": "status class"})
    error_code = fields.String(validate=_text(200))

    @validates_schema
    def _range_is_ordered(self, data: dict[str, Any], **kwargs: Any) -> None:
        start, end = data.get("from_"), data.get("to")
        if start is not None and end is not None and start >= end:
            raise ValidationError("must be after `from`", field_name="to")


class EventListArgs(UsageFilterArgs):
    limit = fields.Integer(load_default=100, validate=validate.Range(1, MAX_LIMIT))
    cursor = fields.String(validate=_text(200),
                           metadata={"description": "next_cursor from the previous page"})


class SummaryArgs(UsageFilterArgs):
    group_by = CommaList(GROUP_BYS, load_default=list, metadata={
        "description": "comma-separated: " + ", ".join(GROUP_BYS)})
    bucket = fields.String(validate=validate.OneOf(BUCKETS), metadata={"description": "time bucket (UTC)"})


class ExportArgs(UsageFilterArgs):
    format = fields.String(load_default="jsonl", validate=validate.OneOf(EXPORT_FORMATS))


class UsageEventSchema(Schema):
    """One usage event; ids are strings, cost_usd an exact decimal string, the key hash only as a prefix."""

    id = fields.Integer()
    request_id = fields.String()
    source = fields.String()
    created_at = fields.String(metadata={"description": "RFC 3339"})
    started_at = fields.String()
    duration_ms = fields.Float()
    route = fields.String(allow_none=True)
    status = fields.Integer()
    upstream_status = fields.Integer(allow_none=True)
    error_code = fields.String(allow_none=True)
    model_requested = fields.String(allow_none=True)
    model_resolved = fields.String(allow_none=True)
    host_id = fields.String(allow_none=True)
    host_name = fields.String(allow_none=True)
    binding_id = fields.String(allow_none=True)
    adapter = fields.String(allow_none=True)
    host_key_name = fields.String(allow_none=True)
    credential_kind = fields.String()
    credential_id = fields.String(allow_none=True)
    relay_key_hash_prefix = fields.String(allow_none=True, metadata={
        "description": "first 8 hex digits of the key value's sha256 (tells rotated values apart)"})
    principal_kind = fields.String(allow_none=True)
    principal_id = fields.String(allow_none=True)
    principal = fields.String(allow_none=True, metadata={"description": "principal name"})
    policy_id = fields.String(allow_none=True)
    policy = fields.String(allow_none=True, metadata={"description": "policy name"})
    project_id = fields.String(allow_none=True)
    project = fields.String(allow_none=True)
    team_id = fields.String(allow_none=True)
    team = fields.String(allow_none=True)
    input_tokens = fields.Integer()
    output_tokens = fields.Integer()
    cached_tokens = fields.Integer()
    cost_nanos = fields.Integer(allow_none=True, metadata={"description": "nano-dollars; null when unpriced"})
    cost_usd = fields.String(allow_none=True, metadata={"description": "exact decimal string"})
    attempts = fields.Integer()
    streamed = fields.Boolean()
    batch_id = fields.String(allow_none=True)
    batch_idx = fields.Integer(allow_none=True)
    custom_id = fields.String(allow_none=True, metadata={"description": "the item's custom_id (OpenAI and "
                                                                        "Anthropic batch APIs)"})


class EventPageSchema(Schema):
    events = fields.List(fields.Nested(UsageEventSchema))
    next_cursor = fields.String(allow_none=True, metadata={"description": "null on the last page"})


class SummaryRowSchema(Schema):
    """Counters for one group; the group's own keys (e.g. `model`, `policy_id`, `bucket`) sit beside them."""

    requests = fields.Integer()
    errors = fields.Integer(metadata={"description": "status >= 400 or an error code, except cancelled items"})
    cancelled = fields.Integer(metadata={"description": "batch items cancelled or expired before they ran"})
    input_tokens = fields.Integer()
    output_tokens = fields.Integer()
    cached_tokens = fields.Integer()
    cost_nanos = fields.Integer(allow_none=True, metadata={
        "description": "sum of priced events, nano-dollars; null when the group's events are all unpriced"})
    cost_usd = fields.String(allow_none=True, metadata={"description": "cost_nanos as an exact decimal string"})
    unpriced = fields.Integer(metadata={"description": "successful events without a price"})


class SummarySchema(Schema):
    group_by = fields.List(fields.String())
    bucket = fields.String(allow_none=True)
    rows = fields.List(fields.Dict(), metadata={"description": "group keys plus the SummaryRow counters"})
    totals = fields.Nested(SummaryRowSchema)
    truncated = fields.Boolean(metadata={"description": "true when more groups exist than rows returned"})
