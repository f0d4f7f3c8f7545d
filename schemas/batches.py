"""The batches API contract: submit envelope, query arguments and the batch objects returned."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from schemas.catalog import PRINTABLE
from schemas.durations import DurationError, parse_duration
from schemas.shapes import RegisteredShape
from schemas.webhooks import CallbackSchema


class ItemState(StrEnum):
    """A batch item's state: queued → running → one of the final three (or queued → final: cancelled, discarded).
    Every transition is app/batches/lifecycle.py's; the API contract reads the names here."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    DISCARDED = "discarded"
    CANCELLED = "cancelled"


# The one list of each: an item's states (active, then final), a batch's statuses; shapes are the adapters'.
ACTIVE_STATES: tuple[str, ...] = (ItemState.QUEUED, ItemState.RUNNING)
FINAL_STATES: tuple[str, ...] = (ItemState.COMPLETED, ItemState.DISCARDED, ItemState.CANCELLED)
ITEM_STATES: tuple[str, ...] = (*ACTIVE_STATES, *FINAL_STATES)
BATCH_STATUSES = ("queued", "cancelled")
MAX_ITEMS_PAGE = 1000
MAX_BATCHES_PAGE = 100


MAX_COMPLETION_WINDOW_S = 366 * 86400


def _completion_window(value: str) -> None:
    try:
        seconds = parse_duration(value)
    except DurationError as exc:
        raise ValidationError(f"{exc} (e.g. 30m, 2h, 24h)") from exc
    if not 1 <= seconds <= MAX_COMPLETION_WINDOW_S:
        raise ValidationError("must be from 1s to 366d")


MAX_COST_LIMIT = 1e9  # dollars: a cap above this is refused (it would not fit the nano-dollar column's range)
MIN_COST = 1e-9  # one nano-dollar, the unit costs are recorded in


class JsonNumber(fields.Float):
    """A JSON number (an integer or a float; never a string or a boolean), finite."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


def max_cost_field(description: str, *, absent_is_none: bool = True) -> JsonNumber:
    """`max_cost`: a spend cap in the pricing's currency (dollars), or null for none (also when absent, unless
    ABSENT_IS_NONE is false: then an absent member stays absent)."""
    extra: dict[str, Any] = {"load_default": None} if absent_is_none else {}
    return JsonNumber(allow_none=True, allow_nan=False, validate=validate.Range(min=MIN_COST, max=MAX_COST_LIMIT),
                      metadata={"description": description}, **extra)


MAX_COST_HELP = ("a spend cap in the pricing's currency (dollars; at least 1e-9, at most 1e9). Hard by default: each "
                 "item's cost bound is reserved before it starts, and an item whose bound does not fit ends "
                 "`discarded` with `budget_exceeded` unrun, so the recorded cost never passes the cap (see "
                 "`max_cost_mode`). Every binding of the models the items name must be priced")
MAX_COST_MODES = ("hard", "soft")
MAX_COST_MODE_HELP = ("`hard` (the default): the recorded cost never passes `max_cost`; an item without an output "
                      "bound (no `max_tokens` and no `max_output_tokens` of its model) cannot run under it. `soft`: "
                      "items start while the recorded cost is below the cap, so items in flight may pass it (by at "
                      "most their number times their cost); items without a bound run")


class BatchEnvelopeSchema(CallbackSchema):
    """The members of a submit body other than `requests` (whose items the shape adapters validate)."""

    class Meta:
        unknown = RAISE

    shape = fields.String(required=True, validate=RegisteredShape())
    metadata = fields.Dict(keys=fields.String(), load_default=None, allow_none=True, metadata={
        "description": "your own labels: at most 16 KiB as JSON and 16 levels deep"})
    completion_window = fields.String(load_default=None, validate=_completion_window, metadata={
        "description": "a deadline, e.g. `2h`: items not started this long after the submit end `discarded` with"
                       " the code `expired`"})
    max_cost = max_cost_field(MAX_COST_HELP)
    max_cost_mode = fields.String(load_default=None, validate=validate.OneOf(MAX_COST_MODES),
                                  metadata={"description": MAX_COST_MODE_HELP})


class BatchSubmitSchema(BatchEnvelopeSchema):
    """`POST /v1/batches` body (documentation; the body is parsed by app.batches.intake in one pass). Members
    other than these are refused."""

    requests = fields.List(fields.Dict(), required=True, validate=validate.Length(min=1), metadata={
        "description": "request bodies of `shape`, without `stream`; each at most RELAY_MAX_REQUEST_BYTES"})


VIEW_FORMATS = ("relay", "openai")
_FORMAT_HELP = ("`relay`: Relay's own view of any batch; `openai`: OpenAI's (batches created through the OpenAI"
                " API). Default: the format of the API that created the batch")


class BatchFormatArgs(Schema):
    """`POST /v1/batches/{id}/cancel`: the view to answer with."""

    class Meta:
        unknown = RAISE

    format = fields.String(validate=validate.OneOf(VIEW_FORMATS), load_default=None,
                           metadata={"description": _FORMAT_HELP})


class BatchItemsArgs(BatchFormatArgs):
    """`GET /v1/batches/{id}`: which items to list (Relay's view)."""

    class Meta:
        unknown = RAISE

    state = fields.String(validate=validate.OneOf(ITEM_STATES), load_default=None)
    after = fields.Integer(validate=validate.Range(min=-1), load_default=-1,
                           metadata={"description": "list items with idx greater than this"})
    limit = fields.Integer(validate=validate.Range(min=0, max=MAX_ITEMS_PAGE), load_default=100)
    custom_id = fields.String(load_default=None, validate=[validate.Length(1, 512), PRINTABLE], metadata={
        "description": "list items whose custom_id starts with this (batches of the OpenAI and Anthropic APIs)"})


class BatchListArgs(Schema):
    """`GET /v1/batches`: a page of the caller's batches, newest first: by default those created through the
    OpenAI API in OpenAI's format; with `format=relay` every batch in Relay's own view."""

    class Meta:
        unknown = RAISE

    format = fields.String(validate=validate.OneOf(VIEW_FORMATS), load_default="openai")
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_BATCHES_PAGE), load_default=20)
    after = fields.String(load_default=None, validate=validate.Length(max=100),
                          metadata={"description": "OpenAI view: the last id of the previous page"})
    cursor = fields.String(load_default=None,
                           metadata={"description": "Relay's view: `next_cursor` of the previous page"})
    status = fields.String(load_default=None, validate=validate.OneOf(BATCH_STATUSES),
                           metadata={"description": "Relay's view: queued or cancelled"})
    finished = fields.Boolean(load_default=None, truthy={"true", "1"}, falsy={"false", "0"}, metadata={
        "description": "Relay's view: true: every item is final; false: some are queued or running"})
    search = fields.String(load_default=None, validate=[validate.Length(1, 200), PRINTABLE], metadata={
        "description": "Relay's view: a batch id (any spelling), or text its metadata holds (any case)"})


class BatchResultsArgs(Schema):
    """`GET /v1/batches/{id}/results`."""

    class Meta:
        unknown = RAISE

    format = fields.String(validate=validate.OneOf(("json", "jsonl")), load_default=None)
    merged = fields.Boolean(load_default=False, metadata={"description": (
        "the merged results of the batch's re-run chain (the same on the original and on each re-run): one entry "
        "per item of the original batch, `idx` being its idx there, each the latest attempt of that item (from the "
        "newest batch of the chain that holds it, whatever its state), with `batch_id`, `batch_idx` and `attempts`")})


class CountsSchema(Schema):
    queued = fields.Integer()
    running = fields.Integer()
    completed = fields.Integer()
    discarded = fields.Integer()
    cancelled = fields.Integer()


class BatchItemSchema(Schema):
    idx = fields.Integer()
    source_idx = fields.Integer(allow_none=True, metadata={
        "description": "a re-run's item: its idx in the chain's original batch (`original_id`); null otherwise"})
    custom_id = fields.String(allow_none=True, metadata={
        "description": "the caller's id of the request (OpenAI and Anthropic batch APIs); null for Relay's own"})
    state = fields.String(validate=validate.OneOf(ITEM_STATES))
    model = fields.String(allow_none=True)
    error = fields.String(allow_none=True)
    error_code = fields.String(allow_none=True)
    started_at = fields.DateTime(allow_none=True)
    finished_at = fields.DateTime(allow_none=True)


class BatchUsageSchema(Schema):
    """A finished batch's tokens and cost, summed from its items' usage events (null while items run)."""

    input_tokens = fields.Integer()
    output_tokens = fields.Integer()
    cached_tokens = fields.Integer()
    cost_nanos = fields.Integer(allow_none=True, metadata={"description": "nano-dollars; null when only unpriced"})
    cost_usd = fields.String(allow_none=True, metadata={"description": "cost_nanos as an exact decimal string"})
    unpriced = fields.Integer(metadata={"description": "completed items without a price"})


class BatchItemDetailSchema(BatchItemSchema):
    """`GET /v1/batches/{id}/items/{idx}`: one item with its request and response."""

    batch_id = fields.UUID()
    request = fields.Raw(allow_none=True, metadata={"description": "the request body as submitted (null when this "
                                                                  "replica cannot read it)"})
    response = fields.Raw(allow_none=True, metadata={"description": "the upstream's body, completed items only"})


class BatchSummarySchema(Schema):
    """A batch without its counts and items (as listed)."""

    id = fields.UUID()
    object = fields.Constant("batch")
    api = fields.String(validate=validate.OneOf(("relay", "openai", "anthropic")),
                        metadata={"description": "the API that created the batch"})
    status = fields.String(validate=validate.OneOf(BATCH_STATUSES))
    shape = fields.String(validate=RegisteredShape())
    total = fields.Integer()
    finished = fields.Boolean()
    finished_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    cancelled_at = fields.DateTime(allow_none=True)
    metadata = fields.Dict(allow_none=True)
    policy_id = fields.UUID()
    project_id = fields.UUID(allow_none=True)
    team_id = fields.UUID(allow_none=True)
    principal_kind = fields.String(allow_none=True)
    principal_id = fields.UUID(allow_none=True)
    credential_kind = fields.String()
    credential_id = fields.UUID()
    completion_window = fields.String(allow_none=True, metadata={"description": "the deadline given at submit"})
    expires_at = fields.DateTime(allow_none=True, metadata={
        "description": "items not started by then end discarded `expired` (cancelled `batch_expired` for batches"
                       " of the provider APIs)"})
    max_cost = fields.Float(allow_none=True, metadata={
        "description": "the batch's spend cap in dollars (rounded down to a nano-dollar); null: none"})
    max_cost_mode = fields.String(allow_none=True, validate=validate.OneOf(MAX_COST_MODES), metadata={
        "description": "how the cap holds (`hard`: never passed; `soft`: items in flight may pass it); null: no cap"})
    max_cost_overshoot = fields.String(allow_none=True, metadata={
        "description": "what the batch may record past its cap, in words (the soft cap's bound); null: no cap"})
    rerun_of = fields.UUID(allow_none=True, metadata={"description": "a re-run: the batch it re-ran; else null"})
    original_id = fields.UUID(allow_none=True, metadata={
        "description": "a re-run: the first batch of its chain (whose idx each item's source_idx is); else null"})
    usage = fields.Nested(BatchUsageSchema, allow_none=True, metadata={
        "description": "once the batch has finished: its tokens and cost (null before)"})


class PacingSchema(Schema):
    """A paced policy's batch: how fast its limits let it run (`batch: {pace: true, share}` in the catalog)."""

    paced = fields.Boolean()
    share = fields.Float(metadata={"description": "fraction of each rate limit batch items may use"})
    items_per_minute = fields.Float(allow_none=True, metadata={
        "description": "the long-run rate the policy's limits allow batch items at that share"})
    expected_finish_at = fields.Float(allow_none=True, metadata={
        "description": "Unix time the queued items are expected to have started by, at that rate (null: never)"})
    waiting_items = fields.Integer(metadata={"description": "items not started yet"})
    fair_part = fields.Float(metadata={"description": "the part of the share this batch's owner gets beside the "
                                                      "other owners waiting on the policy now (1: alone)"})
    items_ahead = fields.Integer(metadata={"description": "items of the owner's older batches of the policy, "
                                                          "which start first"})
    past_deadline = fields.Boolean(metadata={"description": "the expected finish is after `expires_at`"})


class BatchSchema(BatchSummarySchema):
    """A batch with its counts per item state, its recorded cost, one page of items, and the names behind its
    attribution ids."""

    policy = fields.String(allow_none=True, metadata={"description": "policy name"})
    project = fields.String(allow_none=True, metadata={"description": "project name"})
    team = fields.String(allow_none=True, metadata={"description": "team name"})
    principal = fields.String(allow_none=True, metadata={"description": "principal name"})
    credential = fields.String(allow_none=True, metadata={"description": "a relay key's name (or prefix)"})
    counts = fields.Nested(CountsSchema)
    cost_usd = fields.String(metadata={
        "description": "the recorded cost of its final items in dollars, an exact decimal (`\"0.000001234\"`), "
                       "summed as they end; items on unpriced bindings add nothing (their usage events have a null "
                       "cost)"})
    items = fields.List(fields.Nested(BatchItemSchema))
    items_next_after = fields.Integer(allow_none=True,
                                      metadata={"description": "pass as `after` for the next page; null at the end"})
    pacing = fields.Nested(PacingSchema, allow_none=True, metadata={
        "description": "set while a batch of a paced policy has items to start; null otherwise"})


class BatchListSchema(Schema):
    """Relay's view of a page of batches, in the list envelope OpenAI's SDK pages through, plus `next_cursor`."""

    object = fields.Constant("list")
    data = fields.List(fields.Nested(BatchSummarySchema))
    first_id = fields.String(allow_none=True)
    last_id = fields.String(allow_none=True)
    has_more = fields.Boolean()
    next_cursor = fields.String(allow_none=True)


class BatchResultSchema(Schema):
    """One entry of `GET /v1/batches/{id}/results` (documentation: the endpoint streams raw JSON)."""

    idx = fields.Integer()
    custom_id = fields.String(metadata={"description": "batches of the OpenAI and Anthropic APIs only"})
    state = fields.String(validate=validate.OneOf(ITEM_STATES))
    response = fields.Raw(metadata={"description": "the upstream's body, completed items only"})
    error = fields.String(metadata={"description": "discarded and cancelled items"})
    batch_id = fields.UUID(metadata={
        "description": "merged results: the batch of the chain holding the latest attempt"})
    batch_idx = fields.Integer(metadata={"description": "merged results: the latest attempt's idx in that batch"})
    attempts = fields.Integer(metadata={"description": "merged results: how many batches of the chain hold the item"})


class BatchResultsSchema(Schema):
    results = fields.List(fields.Nested(BatchResultSchema))


class BatchDeletedSchema(Schema):
    """`DELETE /v1/batches/{id}`: what was deleted."""

    id = fields.UUID(required=True)
    object = fields.String(required=True, metadata={"example": "batch"})
    deleted = fields.Boolean(required=True)


RERUN_CODE = validate.Regexp(r"^[a-z0-9_]{1,64}$", error="must be an error code (lowercase letters, digits and _)")


class BatchRerunSchema(Schema):
    """`POST /v1/batches/{id}/rerun` body (optional: an empty body re-runs every discarded item)."""

    class Meta:
        unknown = RAISE

    codes = fields.List(fields.String(validate=RERUN_CODE), validate=validate.Length(min=1, max=100), metadata={
        "description": "re-run the discarded or cancelled items whose error code is one of these (e.g. "
                       "`rate_limited`, `all_keys_failed`, `budget_exceeded`, `batch_cancelled`) instead of every "
                       "discarded item"})
    metadata = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "the new batch's metadata (default: the source batch's; OpenAI batches: at most 16 string "
                       "pairs)"})
    max_cost = max_cost_field("the new batch's spend cap in dollars, null for none (default: the source batch's "
                              "cap); as `max_cost` of a submit", absent_is_none=False)
    force = fields.Boolean(load_default=False, metadata={
        "description": "re-run the items even if a re-run of this batch already holds some of them (without it and "
                       "without an `Idempotency-Key`, that is 409 `rerun_exists` naming the re-run)"})
