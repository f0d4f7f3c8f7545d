"""Estimate a batch before submitting it: the same checks as a submit (nothing stored or run), the items per model
and where they would run today, and an upper bound of their cost. No Flask.

The bound, per item, with the binding the item routes to now under the caller's policy:
- input tokens ≤ the item's request bytes. A tokenizer working on bytes (every BPE tokenizer providers use) gives
  each token at least one byte of the text, and the text of a request is never longer than its JSON; the fake
  upstream charges a token per 4 characters of the prompt. What the body's bytes cannot bound: images, audio and
  files referenced by URL (tokens from their size), and tokens a provider adds itself (tool definitions it
  expands, hidden system prompts);
- output tokens ≤ the request's own limit (`max_completion_tokens` / `max_tokens`, times `n`; `max_output_tokens`;
  Anthropic's `max_tokens`), else the model's `max_output_tokens` from the catalog, else unbounded (the cost bound
  is then null);
- priced at the binding's input rate (or its cached rate, if higher) and output rate, rounded per item exactly as
  its usage event will be (so the bound is never below what the batch records for answers within those tokens).
Items whose model does not exist, is not granted, has no binding or cannot take the shape would be discarded at
run unrun: they count zero, with the reason. `timing` reads the caller's policy's current rate-limit windows once
and asks app/batches/pacing.py how long the items take paced, and how many the windows would refuse unpaced.
"""

from __future__ import annotations

import decimal
import math
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import msgspec

from adapters import get_adapter
from adapters.base import ShapeAdapter, Usage
from adapters.errors import AdapterError
from adapters.shapes import plan_dispatch
from app.access.cache import get_catalog, get_policy
from app.access.snapshot import CatalogSnapshot
from app.auth_model import Caller
from app.batches import budget, outbox, pacing
from app.batches.errors import BatchBodyTooLarge
from app.batches.intake import parse_batch, typed_batch
from app.batches.service import batch_columns
from app.catalog.model import Pricing
from app.errors import RelayError
from app.pipeline import routing
from app.runtime import Runtime
from app.usage.events import cost_nanos
from app.usage.queries import cost_usd
from schemas.durations import parse_duration

_DECODERS: dict[str, tuple[ShapeAdapter, msgspec.json.Decoder[Any]]] = {}  # shape → its adapter, its limits' decoder


def _limits_decoder(shape: str) -> tuple[ShapeAdapter, msgspec.json.Decoder[Any]]:
    """SHAPE's adapter and a decoder of `model` and the members of its items that bound their output (its limit
    fields and its choices field; any other member is skipped), built once per adapter registered."""
    adapter = get_adapter(shape)
    known = _DECODERS.get(shape)
    if known is None or known[0] is not adapter:
        names = dict.fromkeys(("model", *adapter.output_limit_fields, *filter(None, (adapter.choices_field,))))
        limits = msgspec.defstruct("Limits", [(name, Any, None) for name in names])
        known = _DECODERS[shape] = (adapter, msgspec.json.Decoder(limits))
    return known


@dataclass
class _Model:
    """What the estimate knows of one model's items."""

    name: str
    runs: bool = True
    problem: dict[str, str] | None = None
    binding: dict[str, str] | None = None
    pricing: Pricing | None = None
    default_output: int | None = None
    items: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    unbounded: int = 0  # items with no output limit of their own or of the model
    cost_nanos: int = 0
    costs: dict[tuple[int, int], int] = field(default_factory=dict)  # (input, output) bound → its cost

    def add(self, size: int, output: int | None) -> None:
        self.items += 1
        if not self.runs:
            return
        self.input_tokens += size
        if output is None:
            self.unbounded += 1
            return
        self.output_tokens += output
        if self.pricing is not None:
            cost = self.costs.get((size, output))
            if cost is None:
                cost = self.costs[(size, output)] = cost_nanos(self.pricing, Usage(size, output)) or 0
            self.cost_nanos += cost

    @property
    def bounded(self) -> bool:
        return not self.runs or (self.pricing is not None and not self.unbounded)

    def view(self) -> dict[str, Any]:
        return {"model": self.name, "items": self.items, "runs": self.runs, "problem": self.problem,
                "binding": self.binding, "priced": self.pricing is not None,
                "max_output_tokens": self.default_output, "items_without_output_limit": self.unbounded,
                "input_tokens_max": self.input_tokens, "output_tokens_max": self.output_tokens,
                "cost_usd_max": cost_usd(self.cost_nanos) if self.bounded else None}


def estimate_batch(runtime: Runtime, caller: Caller, raw: bytes | bytearray) -> dict[str, Any]:
    """What submitting RAW (a `POST /v1/batches` body) would store and could cost; the submit's own errors (400,
    413) for a body it would refuse."""
    shape, columns, bodies, names = _checked(runtime, raw)
    cap = columns.get("max_cost_nanos")
    if cap is not None:
        budget.check_priced(runtime, set(names))
    snapshot = get_catalog(runtime).snapshot()
    models: dict[str, _Model] = {}
    for body, name in zip(bodies, names, strict=True):
        model = models.get(name)
        if model is None:
            model = models[name] = _routed(snapshot, caller.policy_id, shape, name)
        model.add(len(body), output_bound(shape, body, model.default_output))
    found = sorted(models.values(), key=lambda m: m.name)
    bounded = all(m.bounded for m in found)
    total_nanos = sum(m.cost_nanos for m in found)
    runs = sum(m.items for m in found if m.runs)
    tokens = sum(m.input_tokens + m.output_tokens for m in found)
    return {"object": "batch.estimate", "valid": True, "shape": shape, "total": len(names),
            "models": [m.view() for m in found],
            "input_tokens_max": sum(m.input_tokens for m in found),
            "output_tokens_max": sum(m.output_tokens for m in found),
            "cost_usd_max": cost_usd(total_nanos) if bounded else None,
            "max_cost": budget.to_dollars(cap), "max_cost_mode": columns.get("max_cost_mode"),
            "within_max_cost": None if cap is None or not bounded else total_nanos <= cap,
            "timing": _timing(runtime, caller, runs, tokens / runs if runs else None,
                              columns.get("completion_window")),
            "deadline": deadline_verdict(runtime, caller, columns.get("completion_window"), runs,
                                         tokens / runs if runs else None)}


def _timing(runtime: Runtime, caller: Caller, runs: int, tokens_per_item: float | None,
            window: str | None = None) -> dict[str, Any] | None:
    """How RUNS items (of TOKENS_PER_ITEM tokens at most) fare under the caller's policy's rate limits today, paced
    (how long, at its batch share, shared fairly with the other owners waiting on the policy and behind the
    caller's own waiting items: app/batches/pacing.py, app/batches/scheduler.py; and whether that misses the
    completion WINDOW) and not (how many the current windows would refuse, discarded `rate_limited`). None when
    the policy is gone."""
    policy = get_policy(runtime, caller.policy_id)
    if policy is None:
        return None
    now = time.time()
    with runtime.pool.connection() as conn:
        windows = pacing.current_windows(conn, policy.rate_limits, now)
        used = pacing.batch_share_used(conn, policy.rate_limits, now)
        others, ahead = outbox.paced_waiting(conn, policy.id, caller.owner) if policy.batch_pace else (0, 0)
    part = pacing.fair_part(others)
    seconds = pacing.expected_seconds(policy, ahead + runs, used, now, tokens_per_item, part=part)
    admitted = pacing.publishable(policy, windows, now, lambda _: tokens_per_item or 0.0, paced=False)
    rate = pacing.items_per_minute(policy, tokens_per_item)
    return {"policy_paced": policy.batch_pace, "share": policy.batch_share, "items": runs,
            "limited": bool(policy.rate_limits), "items_per_minute": None if rate is None else round(rate, 3),
            "paced_seconds": None if math.isinf(seconds) else round(seconds, 3),
            "fair_part": round(part, 3), "items_ahead": ahead,
            "past_deadline": None if window is None or not policy.batch_pace
            else math.isinf(seconds) or seconds > parse_duration(window),
            "unpaced_rate_limited_items": max(0, runs - admitted)}


def deadline_verdict(runtime: Runtime, caller: Caller, window: str | None, runs: int,
                     tokens_per_item: float | None) -> dict[str, Any] | None:
    """Whether the RUNS items that would run can all start within the completion WINDOW under the caller's policy's
    rate limits today (an item not started by its deadline ends expired), and how many could not; None without a
    window. A paced policy starts them at its share's rate (pacing.expected_seconds); otherwise they may all start
    at once (those the current windows refuse end `rate_limited`: `timing.unpaced_rate_limited_items`)."""
    if window is None:
        return None
    seconds = parse_duration(window)
    policy = get_policy(runtime, caller.policy_id)
    late, starts = 0, 0.0
    if policy is not None and policy.batch_pace and policy.rate_limits and runs:
        now = time.time()
        with runtime.pool.connection() as conn:
            used = pacing.batch_share_used(conn, policy.rate_limits, now)
            others, ahead = outbox.paced_waiting(conn, policy.id, caller.owner)
        part = pacing.fair_part(others)  # shared with the other owners waiting, behind the caller's own (as _timing)

        def start_s(n: int) -> float:
            return pacing.expected_seconds(policy, ahead + n, used, now, tokens_per_item, part=part)

        starts = start_s(runs)
        lo, hi = 0, runs  # the most items that all start in time: start_s grows with the count
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if start_s(mid) <= seconds else (lo, mid - 1)
        late = runs - lo
    return {"completion_window": window, "seconds": seconds,
            "last_start_seconds": None if math.isinf(starts) else round(starts, 3),
            "meets": late == 0, "items_late": late}


def _checked(runtime: Runtime, raw: bytes | bytearray) -> tuple[str, dict[str, Any], list[Any], list[str]]:
    """The submit's checks of RAW, in its order (the typed path, else the scanner: the same errors; a body whose
    envelope the typed path reads has its options checked before its items, as create_batch works out the batch's
    columns first); its shape, the columns of its options (service.batch_columns: max_cost, completion_window,
    callback_url, ...), each item's request bytes and model name."""
    settings = runtime.settings
    if len(raw) > settings.batch_max_bytes:
        raise BatchBodyTooLarge(message=f"a batch body holds at most {settings.batch_max_bytes} bytes")
    limits = {"max_items": settings.batch_max_items, "max_item_bytes": settings.max_request_bytes}
    typed = typed_batch(raw, **limits)
    if typed is not None:
        columns = batch_columns(runtime, typed.options)
        if (names := typed.models()) is not None:
            return typed.shape, columns, typed.bodies(), names
    parsed = parse_batch(raw, **limits)
    return parsed.shape, batch_columns(runtime, parsed.options), list(parsed.item_bodies()), parsed.models


def item_cost_bound(snapshot: CatalogSnapshot, policy_id: UUID, shape: str, body: bytes) -> int | None:
    """The most one item (its request BODY) can cost under the policy now, in nano-dollars, as the estimate counts
    it: 0 when it would be discarded unrun or its binding is unpriced (nothing is recorded), None when its output
    has no bound (no limit of its own, none of its model's)."""
    try:
        name = _limits_decoder(shape)[1].decode(body).model
    except msgspec.DecodeError:
        return 0  # not a request the pipeline can read: refused before any upstream
    model = _routed(snapshot, policy_id, shape, name if isinstance(name, str) else "")
    if not model.runs:
        return 0
    output = output_bound(shape, body, model.default_output)
    if output is None:
        return None
    try:
        return cost_nanos(model.pricing, Usage(len(body), output)) or 0
    except decimal.InvalidOperation:  # past a price's arithmetic (refused at submit since): no bound
        return None


def _routed(snapshot: CatalogSnapshot, policy_id: UUID, shape: str, name: str) -> _Model:
    """Where items of model NAME would run now under the policy, or why they would be discarded unrun."""
    try:
        policy = routing.check_policy(snapshot.policies.get(policy_id))
        route = routing.resolve(snapshot.models, policy, name)
        binding = route.binding
        plan_dispatch(shape, binding.adapter, binding.host.name, batch=True)
    except (RelayError, AdapterError) as exc:
        return _Model(name, runs=False, problem={"code": exc.code, "message": exc.message})
    pricing = binding.pricing
    if pricing is not None and pricing.cached_input_per_mtok is not None:  # the dearer input rate: a true bound
        pricing = Pricing(max(pricing.input_per_mtok, pricing.cached_input_per_mtok), pricing.output_per_mtok)
    return _Model(name, binding={"host": binding.host.name, "adapter": binding.adapter,
                                 "upstream_model": binding.upstream_model},
                  pricing=pricing, default_output=route.model.max_output_tokens)


def output_bound(shape: str, body: Any, default: int | None) -> int | None:
    """The most output tokens an item of SHAPE (its request BODY) can be answered with: its own limit (the
    shape's output_limit_fields), else DEFAULT; times its number of choices (the shape's choices_field)."""
    adapter, decoder = _limits_decoder(shape)
    try:
        limits = decoder.decode(body)
    except msgspec.DecodeError:
        return default
    own = [int(v) for v in (getattr(limits, name) for name in adapter.output_limit_fields) if _positive(v)]
    limit = max(own) if own else default
    if limit is None:
        return None
    choices: Any = getattr(limits, adapter.choices_field) if adapter.choices_field is not None else None
    return limit * (int(choices) if _positive(choices) else 1)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
