"""The operator's batch routes (`/admin/batches`, `/admin/workers`): query arguments and answers."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from schemas.batches import BATCH_STATUSES, MAX_BATCHES_PAGE, BatchSummarySchema
from schemas.catalog import PRINTABLE


class AdminBatchListArgs(Schema):
    """`GET /admin/batches`: every owner's batches, newest first; filters are optional and combined with AND."""

    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_BATCHES_PAGE), load_default=20)
    cursor = fields.String(load_default=None, validate=validate.Length(max=200),
                           metadata={"description": "`next_cursor` of the previous page"})

    principal = fields.String(validate=[validate.Length(1, 240), PRINTABLE], metadata={
        "description": "user or service account: a name or id, optionally prefixed `user:` or `service_account:`"})
    credential = fields.UUID(metadata={"description": "relay key id or inference token id"})
    policy = fields.String(validate=[validate.Length(1, 200), PRINTABLE], metadata={"description": "a name or an id"})
    created_from = fields.AwareDateTime(data_key="from", format="iso",
                                        metadata={"description": "created at or after (RFC 3339)"})
    created_to = fields.AwareDateTime(data_key="to", format="iso",
                                      metadata={"description": "created before (RFC 3339)"})
    status = fields.String(validate=validate.OneOf(BATCH_STATUSES), metadata={"description": "queued or cancelled"})
    finished = fields.Boolean(truthy={"true", "1"}, falsy={"false", "0"},
                              metadata={"description": "true: every item is final; false: some are queued or running"})
    search = fields.String(validate=[validate.Length(1, 200), PRINTABLE], metadata={
        "description": "a batch id (any spelling), or text its metadata holds (any case)"})

    @validates_schema
    def _range_is_ordered(self, data: dict[str, Any], **kwargs: Any) -> None:
        start, end = data.get("created_from"), data.get("created_to")
        if start is not None and end is not None and start >= end:
            raise ValidationError("must be after `from`", field_name="to")


class AdminBatchSummarySchema(BatchSummarySchema):
    """A batch as the operator lists it: with its policy's and principal's names."""

    policy = fields.String(allow_none=True, metadata={"description": "policy name"})
    principal = fields.String(allow_none=True, metadata={"description": "principal name (null once removed)"})


class AdminBatchListSchema(Schema):
    data = fields.List(fields.Nested(AdminBatchSummarySchema))
    next_cursor = fields.String(allow_none=True)


class WorkerSchema(Schema):
    id = fields.String()
    hostname = fields.String()
    pid = fields.Integer()
    started_at = fields.DateTime()
    last_seen = fields.DateTime()
    alive = fields.Boolean(metadata={"description": "heard from within lost_after_s"})
    seen_ago_s = fields.Float(metadata={"description": "seconds since its last heartbeat"})
    running = fields.Integer(metadata={"description": "items it is running now"})


class QueueSchema(Schema):
    name = fields.String()
    reachable = fields.Boolean(metadata={"description": "false when RabbitMQ could not be asked"})
    messages = fields.Integer(allow_none=True, metadata={"description": "messages ready (not yet delivered)"})
    consumers = fields.Integer(allow_none=True)


class WaitingItemsSchema(Schema):
    queued = fields.Integer(metadata={"description": "items of unfinished batches not started yet"})
    unpublished = fields.Integer(metadata={
        "description": "of those, items still only in Postgres: the dispatcher publishes a window of them at a time"
                       " (messages of up to 8 items), sized to the live workers' threads"})
    running = fields.Integer(metadata={"description": "items running now on the workers"})


class FleetSchema(Schema):
    """Worker processes from their heartbeats, and the item queue."""

    workers = fields.List(fields.Nested(WorkerSchema))
    alive = fields.Integer()
    lost_after_s = fields.Float()
    queue = fields.Nested(QueueSchema)
    items = fields.Nested(WaitingItemsSchema)
    broker_ui_url = fields.String(allow_none=True, metadata={"description": "RELAY_BROKER_UI_URL, when set"})
