"""Webhooks: the secret and URL formats, the event types and bodies, and the operator's delivery routes."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import urlsplit

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from schemas.batch_ids import BatchIdField

# OpenAI's batch events (OpenAI-compatible batches get exactly these) and Relay's (its own and Anthropic-compatible
# batches). Relay never sends batch.failed: a batch whose input is invalid is refused at create, never stored.
OPENAI_EVENT_TYPES = ("batch.completed", "batch.cancelled", "batch.expired", "batch.failed")
RELAY_EVENT_TYPES = ("batch.finished", "batch.cancelled")
EVENT_TYPES = ("batch.completed", "batch.cancelled", "batch.expired", "batch.failed", "batch.finished")
DELIVERY_STATES = ("pending", "delivered", "failed")
SECRET_PREFIX = "whsec_"  # noqa: S105  (the format's prefix, not a secret)
SECRET_BYTES = (24, 64)  # Standard Webhooks: a secret is 24 to 64 random bytes
MAX_URL = 2000
MAX_DELIVERIES_PAGE = 200
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


def secret_bytes(text: str) -> bytes:
    """The key of a `whsec_<base64>` secret; ValueError saying what is wrong (never echoing the value)."""
    body = text[len(SECRET_PREFIX):] if text.startswith(SECRET_PREFIX) else None
    if body is None or not _BASE64.match(body):
        raise ValueError(f"must be {SECRET_PREFIX} followed by standard base64 (with its = padding)")
    try:
        key = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"must be {SECRET_PREFIX} followed by standard base64 (with its = padding)") from None
    if not SECRET_BYTES[0] <= len(key) <= SECRET_BYTES[1]:
        raise ValueError(f"must encode {SECRET_BYTES[0]} to {SECRET_BYTES[1]} bytes (got {len(key)})")
    return key


def check_secret(value: str) -> None:
    """marshmallow validator: a Standard Webhooks secret."""
    try:
        secret_bytes(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def url_problem(value: str) -> str | None:
    """Why VALUE is not an http(s) URL Relay can deliver to; None when it is."""
    if len(value) > MAX_URL or _CONTROL.search(value):
        return f"must be an http:// or https:// URL of at most {MAX_URL} characters, without spaces"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "must be an http:// or https:// URL with a valid host and port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    if parts.fragment or value.endswith("#"):
        return "must not have a #fragment"
    if port == 0:
        return "must not name port 0"
    return None


def check_url(value: str) -> None:
    """marshmallow validator: an http(s) URL without credentials."""
    problem = url_problem(value)
    if problem:
        raise ValidationError(problem)


class CallbackSchema(Schema):
    """A batch's own webhook destination, given when it is created (Relay's submit, OpenAI's create)."""

    callback_url = fields.String(validate=check_url, metadata={
        "description": "an http(s) URL that receives the batch's webhook event when it ends; only hosts the operator"
                       " allows (RELAY_WEBHOOK_ALLOWED_HOSTS), else 400 callback_url_not_allowed"})
    callback_secret = fields.String(load_only=True, validate=[validate.Length(max=200), check_secret], metadata={
        "description": "whsec_<base64 of 24-64 bytes>: signs the callback's deliveries (Standard Webhooks); stored"
                       " encrypted, never returned. Required with callback_url"})

    @validates_schema
    def _callback_pair(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("callback_url" in data) != ("callback_secret" in data):
            missing = "callback_secret" if "callback_url" in data else "callback_url"
            raise ValidationError("callback_url and callback_secret go together", field_name=missing)


# -- The event bodies (documentation: the OpenAPI document's components) ------------------------------------------

class EventBatchRefSchema(Schema):
    id = fields.String(metadata={"description": "the batch, as OpenAI names it: batch_<hex>"})


class _EventSchema(Schema):
    """What every event body has: its id, `object`, and when the batch ended."""

    id = fields.String(metadata={"description": "evt_<hex>; also the webhook-id header, the same on every attempt"})
    object = fields.Constant("event")
    created_at = fields.Integer(metadata={"description": "when the batch ended (Unix seconds)"})


class OpenAIBatchEventSchema(_EventSchema):
    """The body sent for an OpenAI-compatible batch: exactly OpenAI's event, so `openai.OpenAI(webhook_secret=...)
    .webhooks.unwrap(body, headers)` returns a typed `Batch*WebhookEvent`."""

    type = fields.String(validate=validate.OneOf(OPENAI_EVENT_TYPES))
    data = fields.Nested(EventBatchRefSchema)


class EventCountsSchema(Schema):
    completed = fields.Integer()
    discarded = fields.Integer()
    cancelled = fields.Integer(metadata={"description": "includes requests stopped by the batch's expiry"})


class RelayBatchEventDataSchema(Schema):
    id = fields.String(metadata={"description": "the batch's id in the API that created it: a UUID (Relay's API) or"
                                                " msgbatch_<hex> (Anthropic's)"})
    object = fields.Constant("batch")
    api = fields.String(validate=validate.OneOf(("relay", "anthropic")))
    status = fields.String(validate=validate.OneOf(("queued", "cancelled")))
    total = fields.Integer()
    counts = fields.Nested(EventCountsSchema)
    created_at = fields.String(metadata={"description": "RFC 3339"})
    finished_at = fields.String(metadata={"description": "RFC 3339: when its last item became final"})
    metadata = fields.Dict(allow_none=True)


class RelayBatchEventSchema(_EventSchema):
    """The body sent for Relay's own and Anthropic-compatible batches: the same envelope and signature, with the
    batch's counts. `batch.finished` when every item is final, `batch.cancelled` for a cancelled batch."""

    type = fields.String(validate=validate.OneOf(RELAY_EVENT_TYPES))
    data = fields.Nested(RelayBatchEventDataSchema)


# -- The operator's routes: /admin/webhooks/deliveries ----------------------------------------------------------

class DeliveryListArgs(Schema):
    """`GET /admin/webhooks/deliveries`: newest first, optionally of one state or one batch."""

    state = fields.String(validate=validate.OneOf(DELIVERY_STATES), load_default=None)
    batch_id = BatchIdField(load_default=None)
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_DELIVERIES_PAGE), load_default=50)
    cursor = fields.String(validate=validate.Length(max=200), load_default=None,
                           metadata={"description": "`next_cursor` of the previous page"})


class AttemptSchema(Schema):
    n = fields.Integer(metadata={"description": "1 for the first attempt"})
    started_at = fields.DateTime()
    status = fields.Integer(allow_none=True, metadata={"description": "the receiver's HTTP status, if it answered"})
    latency_ms = fields.Float(allow_none=True)
    error = fields.String(allow_none=True, metadata={"description": "why the attempt did not deliver"})


class DeliverySchema(Schema):
    id = fields.UUID()
    event_id = fields.String(metadata={"description": "evt_<hex>: the webhook-id header of every attempt"})
    event_type = fields.String(validate=validate.OneOf(EVENT_TYPES))
    batch_id = fields.UUID()
    destination = fields.String(metadata={"description": "project:<name>, team:<name> or callback"})
    url = fields.String()
    state = fields.String(validate=validate.OneOf(DELIVERY_STATES))
    attempts = fields.Integer()
    next_attempt_at = fields.DateTime(allow_none=True, metadata={"description": "while pending"})
    last_status = fields.Integer(allow_none=True)
    last_error = fields.String(allow_none=True)
    created_at = fields.DateTime()
    finished_at = fields.DateTime(allow_none=True, metadata={"description": "delivered, or given up"})


class BatchDeliverySchema(DeliverySchema):
    """A delivery of the caller's own batch with every attempt, oldest first (a project's or team's endpoint by its
    origin only)."""

    attempt_log = fields.List(fields.Nested(AttemptSchema))


class BatchDeliveriesSchema(Schema):
    data = fields.List(fields.Nested(BatchDeliverySchema), metadata={"description": "newest first"})


class DeliveryListSchema(Schema):
    data = fields.List(fields.Nested(DeliverySchema))
    next_cursor = fields.String(allow_none=True)


class DeliveryDetailSchema(DeliverySchema):
    """A delivery with every attempt, oldest first, and the event body it sends."""

    attempt_log = fields.List(fields.Nested(AttemptSchema))
    event = fields.Raw(metadata={"description": "the body every attempt sends (OpenAIBatchEvent or RelayBatchEvent)"})


def event_schemas() -> dict[str, Any]:
    """The event bodies, by the component name the OpenAPI document gives them."""
    return {"OpenAIBatchEvent": OpenAIBatchEventSchema, "RelayBatchEvent": RelayBatchEventSchema}
