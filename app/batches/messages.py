"""The items of one message, run one after another on the thread that took it (app/batches/runner.py runs each).

Each next item is claimed in the same transaction that commits the previous one's final state (the group
writer's `then`), so a message of N items costs one claim statement, not N, and an item is still claimed only
once its predecessor is final: a killed worker leaves at most one item per thread running. A stopping worker
claims nothing more and hands the rest back. An item of a paced policy first waits for its admission to the
rate limits, before its claim; the next one is claimed with its predecessor only when its admission is there at
once (else it waits like a first item).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any
from uuid import UUID

from app.auth import get_policy
from app.batches import capped
from app.batches.runner import Claimed, WorkerContext, run_item
from app.catalog.model import Policy
from app.errors import RateLimited
from app.observability.logs import log_context
from app.observability.tracing import get_tracing
from app.pipeline import keypool
from app.pipeline.interrupt import Interrupter
from app.pipeline.keyhealth import get_key_health
from app.pipeline.ratelimit import LimiterUnavailable, Reservation, get_limiter

STOPPING = object()  # paced_admission: the worker is stopping, the item goes back to the queue
NOT_NOW = object()  # a paced item whose budget is not there at once
PACED_WAIT_STEP_S = 1.0  # a paced item waiting for budget looks again at least this often
PACED_HOLD_S = 60.0  # then its message goes back to the queue (a message held for long trips the broker's timeout)
THEN_WAIT_S = 5.0  # how long the claim of the next item may take once its predecessor's final state is committed


def run_items(ctx: WorkerContext, batch_id: UUID, idxs: Sequence[int], *, trace: str | None = None) -> list[int]:
    """Run the items of one message; returns those not started because the worker is stopping. TRACE: the submit's
    traceparent, which each item's trace (its own: a root span here) links to; a message without it (published
    again by the lost-message sweep, or before tracing was on) takes it from the batch's row."""
    carried: Claimed | float | None = None  # the next item claimed, or since when its claim may have committed unseen
    tracing = get_tracing(ctx.runtime)
    if trace is None and tracing.enabled:
        trace = (ctx.batch_info(batch_id) or {}).get("trace_context")
    for n, idx in enumerate(idxs):
        with log_context(batch_id=str(batch_id), idx=idx), tracing.linked_root(
                "relay.batch_item", trace, {"relay.batch.id": str(batch_id), "relay.batch.idx": idx}):
            admitted: Any = None
            if not isinstance(carried, Claimed):
                if ctx.stopping.is_set() and n:
                    return list(idxs[n:])
                admitted = paced_admission(ctx, batch_id)
                if admitted is STOPPING:
                    return list(idxs[n:])
            following = idxs[n + 1] if n + 1 < len(idxs) else None
            carried = _run_and_claim_next(ctx, batch_id, idx, admitted, carried, following)
    return []


def _run_and_claim_next(ctx: WorkerContext, batch_id: UUID, idx: int, admitted: Reservation | None,
                        claimed: Claimed | float | None, following: int | None) -> Claimed | float | None:
    """Run IDX (claimed already, or not, or maybe since a moment: see run_items); claim FOLLOWING with its final
    state when it may: what was claimed, or when the commit's answer did not say, since when it may have been."""
    asked: list[tuple[int, Future[Any], Interrupter, Reservation | None, float]] = []

    def then() -> tuple[int, Future[Any]] | None:
        if following is None or ctx.stopping.is_set() or capped.is_hard(ctx.batch_info(batch_id)):
            return None  # a hard-capped batch's item is claimed with its bound reserved, on its own
        next_admission = _admission_now(ctx, batch_id)
        if next_admission is NOT_NOW:
            return None
        interrupter = Interrupter()
        if not ctx.registry.add((batch_id, following), interrupter):
            get_limiter(ctx.runtime).give_back(next_admission)
            return None
        future: Future[Any] = Future()
        asked.append((following, future, interrupter, next_admission, time.monotonic()))
        return following, future

    run_item(ctx, batch_id, idx, admitted, claimed=claimed if isinstance(claimed, Claimed) else None, then=then,
             claimed_since=claimed if isinstance(claimed, float) else None)
    if not asked:
        return None
    next_idx, future, interrupter, next_admission, asked_at = asked[0]
    unknown = False
    try:
        row = future.result(THEN_WAIT_S)
    except Exception:  # the commit did not say (cut, failed, or late): the next item goes the usual way, and its
        row, unknown = None, True  # claim adopts this worker's own claim of it if that commit made one after all
    if row is None:
        ctx.registry.remove((batch_id, next_idx))
        get_limiter(ctx.runtime).give_back(next_admission)
        return asked_at if unknown else None
    return Claimed(next_idx, row, interrupter, next_admission)


def paced_admission(ctx: WorkerContext, batch_id: UUID) -> Any:
    """For a batch of a paced policy: wait until one of its keys is out of its breaker's cool-down and its rate
    limits admit one more batch item (the admission, a Reservation); STOPPING if the worker stops meanwhile or
    PACED_HOLD_S passed (the message goes back to the queue and comes again). None for other batches, and when the
    batch was cancelled or passed its deadline (its claim then settles the item)."""
    policy, expires = _paced_policy(ctx, batch_id)
    if policy is None:
        return None
    limiter, give_up = get_limiter(ctx.runtime), time.monotonic() + PACED_HOLD_S
    while not ctx.stopping.is_set() and time.monotonic() < give_up:
        if batch_id in ctx.cancelled or (expires is not None and expires <= time.time()):
            return None
        cooldown = keypool.cooldown_left(get_key_health(ctx.runtime).health, policy)
        if cooldown is not None:  # every key's breaker is open: wait for one to come back, as for budget
            wait = cooldown
        else:
            try:
                return limiter.admit(policy.rate_limits, batch=True, share=policy.batch_share, paced=True)
            except RateLimited as exc:
                wait = getattr(exc, "retry_at", time.time() + PACED_WAIT_STEP_S) - time.time()
            except LimiterUnavailable:
                wait = PACED_WAIT_STEP_S
        ctx.waiting += 1
        try:
            ctx.stopping.wait(min(max(0.02, wait), PACED_WAIT_STEP_S))
        finally:
            ctx.waiting -= 1
    return STOPPING


def _admission_now(ctx: WorkerContext, batch_id: UUID) -> Any:
    """The admission of a paced batch's next item if its budget is there at once (None for other batches),
    NOT_NOW otherwise."""
    policy, _ = _paced_policy(ctx, batch_id)
    if policy is None:
        return None
    if keypool.cooldown_left(get_key_health(ctx.runtime).health, policy) is not None:
        return NOT_NOW
    found = get_limiter(ctx.runtime).admit_now(policy.rate_limits, batch=True, share=policy.batch_share, paced=True)
    return NOT_NOW if found is None else found


def _paced_policy(ctx: WorkerContext, batch_id: UUID) -> tuple[Policy | None, float | None]:
    """The batch's policy when it is paced (None otherwise), and the batch's deadline (epoch seconds)."""
    info = ctx.batch_info(batch_id)
    if info is None:
        return None, None
    policy = get_policy(ctx.runtime, info["policy_id"])
    if policy is None or not policy.batch_pace or not policy.rate_limits or not policy.enabled:
        return None, None
    expires = info["expires_at"]
    return policy, expires.timestamp() if expires is not None else None
