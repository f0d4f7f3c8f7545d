"""The batch estimate's answer (`POST /v1/batches/estimate`): the checks, the cost bound and the timing of a submit
that would be made, nothing stored."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from schemas.batches import MAX_COST_MODES
from schemas.shapes import RegisteredShape


class EstimateProblemSchema(Schema):
    code = fields.String(metadata={"description": "the error code the items would be discarded with"})
    message = fields.String()


class EstimateBindingSchema(Schema):
    host = fields.String()
    adapter = fields.String()
    upstream_model = fields.String()


class EstimateModelSchema(Schema):
    """One model's items in an estimate."""

    model = fields.String(metadata={"description": "the name the items give"})
    items = fields.Integer()
    runs = fields.Boolean(metadata={"description": "false: the items would be discarded unrun (see `problem`)"})
    problem = fields.Nested(EstimateProblemSchema, allow_none=True, metadata={
        "description": "why the items would be discarded unrun today: model_not_found, model_not_allowed, "
                       "no_binding, cross_shape_dispatch, policy_disabled, ..."})
    binding = fields.Nested(EstimateBindingSchema, allow_none=True,
                            metadata={"description": "where the items would run today under your policy"})
    priced = fields.Boolean(metadata={"description": "whether that binding has pricing (else no cost bound)"})
    max_output_tokens = fields.Integer(allow_none=True, metadata={
        "description": "the model's default output limit from the catalog (items without one of their own)"})
    items_without_output_limit = fields.Integer(metadata={
        "description": "items with no output limit of their own and none from the model: their cost has no bound"})
    input_tokens_max = fields.Integer(metadata={"description": "at most one token per request byte"})
    output_tokens_max = fields.Integer(metadata={
        "description": "the items' own limits (times `n`), else the model's `max_output_tokens`"})
    cost_usd_max = fields.String(allow_none=True, metadata={
        "description": "an upper bound of the items' cost in dollars, an exact decimal; null when unpriced or "
                       "when an item has no output limit"})


class EstimateTimingSchema(Schema):
    """How the items that would run fare under your policy's rate limits today (the current windows, as granted so
    far on every replica; sharing the policy's batch share fairly with the owners waiting on it now, behind your
    own waiting items, and assuming the workers keep up)."""

    policy_paced = fields.Boolean(metadata={"description": "whether your policy paces batches (`batch: {pace}`)"})
    share = fields.Float(metadata={"description": "the policy's batch share of each rate limit"})
    items = fields.Integer(metadata={"description": "the items that would run (not those discarded unrun)"})
    limited = fields.Boolean(metadata={"description": "whether the policy has rate limits at all"})
    items_per_minute = fields.Float(allow_none=True, metadata={
        "description": "the long-run rate the limits allow batch items at the share (null: no limit bounds it)"})
    paced_seconds = fields.Float(allow_none=True, metadata={
        "description": "paced: seconds until the last item has started (0: all at once; null: never, a limit "
                       "admits no batch item); token limits are counted at the items' token bound"})
    fair_part = fields.Float(metadata={
        "description": "paced: the part of the share you get beside the other owners waiting on the policy now"})
    items_ahead = fields.Integer(metadata={
        "description": "paced: items of your batches waiting on the policy now, which start before these"})
    past_deadline = fields.Boolean(allow_none=True, metadata={
        "description": "paced: whether the last item is expected to start after the body's `completion_window` "
                       "(null: no completion_window, or not paced)"})
    unpaced_rate_limited_items = fields.Integer(metadata={
        "description": "not paced: how many items the current windows would refuse (discarded `rate_limited`) if "
                       "the workers started every item now"})


class EstimateDeadlineSchema(Schema):
    """Whether the items that would run can all start within the body's `completion_window` under your policy's
    rate limits today (an item not started by the deadline ends expired)."""

    completion_window = fields.String()
    seconds = fields.Float(metadata={"description": "the window in seconds"})
    last_start_seconds = fields.Float(allow_none=True, metadata={
        "description": "seconds until the last item may start (paced policies; 0: all at once; null: never)"})
    meets = fields.Boolean(metadata={"description": "whether every item that would run can start in time"})
    items_late = fields.Integer(metadata={"description": "how many could not, and would end expired"})


class BatchEstimateSchema(Schema):
    """`POST /v1/batches/estimate`: what a submit of the same body would store and could cost (a body a submit
    would refuse gets the submit's own error instead)."""

    object = fields.Constant("batch.estimate")
    valid = fields.Boolean(metadata={"description": "always true: a body a submit would refuse is answered with "
                                                    "the submit's own 400/413 error"})
    shape = fields.String(validate=RegisteredShape())
    total = fields.Integer(metadata={"description": "items"})
    models = fields.List(fields.Nested(EstimateModelSchema), metadata={"description": "by model name"})
    input_tokens_max = fields.Integer()
    output_tokens_max = fields.Integer()
    cost_usd_max = fields.String(allow_none=True, metadata={
        "description": "an upper bound of the batch's cost in dollars (exact decimal); null when a model that "
                       "would run is unpriced or an item has no output limit"})
    max_cost = fields.Float(allow_none=True, metadata={"description": "the body's `max_cost`, as it would be kept"})
    timing = fields.Nested(EstimateTimingSchema, allow_none=True, metadata={
        "description": "how long the batch takes under your policy's limits, paced or not"})
    deadline = fields.Nested(EstimateDeadlineSchema, allow_none=True, metadata={
        "description": "with a `completion_window`: whether the batch can start every item within it; else null"})
    max_cost_mode = fields.String(allow_none=True, validate=validate.OneOf(MAX_COST_MODES), metadata={
        "description": "how the cap would hold (`hard` by default); null without a cap"})
    within_max_cost = fields.Boolean(allow_none=True, metadata={
        "description": "whether the cost bound stays within `max_cost` (false: the cap may stop the batch); null "
                       "without a cap or a bound"})
