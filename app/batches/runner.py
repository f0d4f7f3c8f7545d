"""Run one batch item: claim it, check credential and policy, load its request, call the pipeline, store the
response, finalize it with exactly one usage event. Never raises for an item failure: the error belongs in
Postgres, not in a dead-letter queue."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

import psycopg

from app.auth import get_policy, recheck_caller
from app.auth_model import Caller
from app.batches import store
from app.batches.registry import ItemRegistry
from app.db import Statement, autocommit, execute_together
from app.errors import RelayError
from app.observability.metrics import observe_item
from app.payloads import PayloadMissing, PayloadStore, PayloadStoreUnavailable
from app.pipeline import run_inference
from app.pipeline.interrupt import Interrupted, Interrupter
from app.pipeline.types import InferenceCall
from app.runtime import Runtime
from app.usage.events import UsageEvent, record_usage

log = logging.getLogger("relay.batches.runner")
FINALIZE_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between attempts to record an item's outcome
CLAIM_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between attempts to claim an item


@dataclass
class WorkerContext:
    """What a worker process shares between its item threads and its background threads."""

    runtime: Runtime
    worker_id: str
    payloads: PayloadStore
    registry: ItemRegistry = field(default_factory=ItemRegistry)
    on_finalized: Callable[[], None] = lambda: None  # wakes the local dispatcher (the window has room)


@dataclass(frozen=True)
class Outcome:
    """How an item ended: final state, error text and code, and the status of its usage event."""

    state: str
    error: str | None = None
    error_code: str | None = None
    status: int = 200
    recorded: bool = False  # the pipeline already wrote this item's usage event
    record: list[Statement] | None = field(default=None, compare=False)
    # the pipeline's usage writes for this item, committed together with its final state


@dataclass(frozen=True)
class ClaimedItem:
    batch_id: UUID
    idx: int
    shape: str
    policy_id: UUID
    caller: Caller
    model: str | None
    custom_id: str | None
    started: float  # time.time() of the claim


def run_item(ctx: WorkerContext, batch_id: UUID, idx: int) -> str:
    """Run item IDX of BATCH_ID once; returns the state it ended in (or why nothing was done).

    The item is registered before the claim, so a cancel committed right after the claim finds it here.
    """
    key, interrupter = (batch_id, idx), Interrupter()
    if not ctx.registry.add(key, interrupter):
        return "duplicate"  # the same item is running on this worker
    try:
        row, retried = _claim(ctx, batch_id, idx)
        if row is None:
            return settle_unclaimed(ctx, batch_id, idx, own_claim_unknown=retried)
        item = _claimed(row, idx)
        deadline = time.monotonic() + ctx.runtime.settings.batch_item_time_limit_s
        ctx.registry.set_deadline(key, deadline)
        try:
            outcome = _execute(ctx, item, interrupter, deadline)
        except Exception:
            log.exception("batch item %s:%s failed unexpectedly", batch_id, idx)
            outcome = _stopped(interrupter) or Outcome("discarded", "internal error while running the item",
                                                       "internal_error", 500)
    finally:
        ctx.registry.remove(key)
        interrupter.release()
    finalize(ctx, item, outcome)
    return outcome.state


def _claim(ctx: WorkerContext, batch_id: UUID, idx: int) -> tuple[dict[str, Any] | None, bool]:
    """queued → running for this worker, retried through a database blip (an acked message whose claim failed
    would leave the item waiting for the lost-message sweep); the claimed row or None, and whether it retried."""
    retried = False
    for delay in (*CLAIM_RETRIES_S, None):
        try:
            with autocommit(ctx.runtime.pool) as conn:  # one statement: no BEGIN/COMMIT round trips
                return store.claim_item(conn, batch_id, idx, ctx.worker_id), retried
        except psycopg.OperationalError as exc:
            if delay is None:
                raise
            log.warning("claiming %s:%s failed (%s); retrying in %.1fs", batch_id, idx, exc, delay)
            retried = True
            time.sleep(delay)
    raise AssertionError("unreachable")


def time_limit_outcome() -> Outcome:
    """The outcome of an item stopped by its time limit."""
    return Outcome("discarded", "time limit exceeded", "time_limit_exceeded", 504)


def _execute(ctx: WorkerContext, item: ClaimedItem, interrupter: Interrupter, deadline: float) -> Outcome:
    """Everything between the claim and the final update; returns the outcome instead of raising."""
    runtime = ctx.runtime
    early = _precheck(runtime, item)
    if early is not None:
        return early
    try:
        body = json.loads(ctx.payloads.read_request(item.batch_id, item.idx))
    except (PayloadMissing, ValueError) as exc:
        return Outcome("discarded", f"load input: cannot read the item's request file ({exc})",
                       "load_input_failed", 500)
    call = InferenceCall(shape=item.shape, body=body, caller=item.caller, policy_id=item.policy_id,
                         source="batch", request_id=f"{item.batch_id}:{item.idx}", route="/v1/batches",
                         batch_id=item.batch_id, batch_idx=item.idx, custom_id=item.custom_id, deadline=deadline,
                         interrupter=interrupter, started_at=item.started, record_later=True)
    try:
        result = run_inference(runtime, call)
    except Interrupted as exc:
        return _stopped(interrupter) or _interrupted(exc.reason)
    except RelayError as exc:
        return _stopped(interrupter) or Outcome("discarded", exc.message, exc.code, exc.status, recorded=True)
    stopped = _stopped(interrupter)
    if stopped is not None:
        return replace(stopped, record=result.record)
    if not 200 <= result.status < 300:
        return Outcome("discarded", f"upstream returned status {result.status}", "upstream_error", result.status,
                       recorded=True, record=result.record)
    return replace(_store_response(ctx, item, result.body or b""), record=result.record)


def _precheck(runtime: Runtime, item: ClaimedItem) -> Outcome | None:
    """The batch's policy must still exist and be enabled, and the submitting credential must still work."""
    policy = get_policy(runtime, item.policy_id)
    if policy is None:
        return Outcome("discarded", "the batch's policy was deleted", "policy_deleted", 403)
    if not policy.enabled:
        return Outcome("discarded", "the batch's policy is disabled", "policy_disabled", 403)
    try:
        recheck_caller(runtime, item.caller)
    except RelayError as exc:
        return Outcome("discarded", f"the submitting credential stopped working: {exc.message}", exc.code, 401)
    return None


def _store_response(ctx: WorkerContext, item: ClaimedItem, body: bytes) -> Outcome:
    """Keep the upstream's answer whole (one JSON document on one line, so JSON Lines results stay valid)."""
    try:
        document = json.loads(body)
    except ValueError:
        return Outcome("discarded", "the upstream's answer is not JSON", "invalid_upstream_response", 502, True)
    if b"\n" in body or b"\r" in body:
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        ctx.payloads.write_response(item.batch_id, item.idx, body)
    except PayloadStoreUnavailable as exc:
        return Outcome("discarded", f"cannot store the response: {exc.message}", exc.code, 507, True)
    return Outcome("completed", recorded=True)


def _stopped(interrupter: Interrupter) -> Outcome | None:
    """The outcome forced by an interrupt (cancel or time limit), if one happened."""
    return _interrupted(interrupter.reason) if interrupter.reason else None


def _interrupted(reason: str) -> Outcome:
    if reason == "cancelled":
        return Outcome("cancelled", "cancelled while running", "batch_cancelled", 499)
    return time_limit_outcome()


def finalize(ctx: WorkerContext, item: ClaimedItem, outcome: Outcome) -> None:
    """running (ours) → final state + usage event (unless the pipeline wrote it); retried through a database
    blip, since an item left running under a live worker is only reaped after its time limit."""
    for delay in FINALIZE_RETRIES_S:
        try:
            _finalize_once(ctx, item, outcome)
            break
        except psycopg.OperationalError as exc:
            log.warning("finalizing %s:%s failed (%s); retrying in %.0fs", item.batch_id, item.idx, exc, delay)
            time.sleep(delay)
    else:
        _finalize_once(ctx, item, outcome)
    observe_item(outcome.state, time.time() - item.started)
    ctx.on_finalized()


def _finalize_once(ctx: WorkerContext, item: ClaimedItem, outcome: Outcome) -> None:
    if outcome.record is not None:  # the final state and the pipeline's usage writes: one atomic statement
        final = store.finalize_statement(item.batch_id, item.idx, state=outcome.state, error=outcome.error,
                                         error_code=outcome.error_code, worker_id=ctx.worker_id)
        with autocommit(ctx.runtime.pool) as conn:
            execute_together(conn, [final, *outcome.record])
        return
    if outcome.recorded:
        with autocommit(ctx.runtime.pool) as conn:
            store.finalize_item(conn, item.batch_id, item.idx, state=outcome.state, error=outcome.error,
                                error_code=outcome.error_code, worker_id=ctx.worker_id)
        return
    with ctx.runtime.pool.connection() as conn, conn.transaction():
        done = store.finalize_item(conn, item.batch_id, item.idx, state=outcome.state, error=outcome.error,
                                   error_code=outcome.error_code, worker_id=ctx.worker_id)
        if done and not outcome.recorded:
            record_usage(conn, usage_event(item.caller, item.policy_id, item.batch_id, item.idx, item.model,
                                           outcome, started=item.started, custom_id=item.custom_id))


def settle_unclaimed(ctx: WorkerContext, batch_id: UUID, idx: int, *, own_claim_unknown: bool = False) -> str:
    """A message whose item could not be claimed: cancel it, discard it as worker lost, or do nothing.

    OWN_CLAIM_UNKNOWN: an earlier attempt of this claim failed, so an item running under this worker's id may be
    that attempt having committed unseen. It is discarded, never run: whether it ran is not known for sure.
    """
    with ctx.runtime.pool.connection() as conn:
        row = store.item_status(conn, batch_id, idx, ctx.runtime.settings.worker_lost_after_s)
    if row is None:
        return "unknown"
    if row["state"] == "queued" and row["batch_status"] == "cancelled":
        outcome = Outcome("cancelled", "cancelled", "batch_cancelled", 499)
        done = finalize_by_key(ctx.runtime, batch_id, idx, outcome, from_state="queued")
    elif row["state"] == "running" and row["worker_id"] == ctx.worker_id and own_claim_unknown:
        outcome = claim_interrupted_outcome()
        done = finalize_by_key(ctx.runtime, batch_id, idx, outcome, owner=ctx.worker_id)
    elif row["state"] == "running" and row["owner_lost"] and row["worker_id"] != ctx.worker_id:
        outcome = worker_lost_outcome()
        done = finalize_by_key(ctx.runtime, batch_id, idx, outcome, owner=row["worker_id"])
    else:
        return "duplicate"
    return outcome.state if done else "duplicate"


def finalize_by_key(runtime: Runtime, batch_id: UUID, idx: int, outcome: Outcome, *, from_state: str = "running",
                    owner: str | None = None) -> bool:
    """FROM_STATE (owned by OWNER if given) → OUTCOME, with its usage event; False if the item had moved on."""
    with runtime.pool.connection() as conn, conn.transaction():
        row = store.item_status(conn, batch_id, idx, runtime.settings.worker_lost_after_s)
        if row is None or not store.finalize_item(conn, batch_id, idx, state=outcome.state, error=outcome.error,
                                                  error_code=outcome.error_code, from_state=from_state,
                                                  worker_id=owner):
            return False
        record_usage(conn, usage_event(caller_from_row(row), row["policy_id"], batch_id, idx, row["model"], outcome,
                                       custom_id=row["custom_id"]))
    return True


def claim_interrupted_outcome() -> Outcome:
    return Outcome("discarded", "claim interrupted: the database connection dropped while the item was claimed",
                   "claim_interrupted", 503)


def worker_lost_outcome() -> Outcome:
    return Outcome("discarded", "worker lost: the worker running the item stopped", "worker_lost", 500)


def usage_event(caller: Caller, policy_id: UUID, batch_id: UUID, idx: int, model: str | None, outcome: Outcome,
                started: float | None = None, custom_id: str | None = None) -> UsageEvent:
    """The usage event of an item that did not reach (or did not finish) the pipeline: no tokens."""
    return UsageEvent.for_caller(caller, request_id=f"{batch_id}:{idx}", source="batch", status=outcome.status,
                                 policy_id=policy_id, started=started, error_code=outcome.error_code,
                                 model_requested=model, route="/v1/batches", batch_id=batch_id, batch_idx=idx,
                                 custom_id=custom_id)


def caller_from_row(row: dict[str, Any]) -> Caller:
    """The submitting caller, rebuilt from the attribution recorded on the batch."""
    return Caller(credential_kind=row["credential_kind"], credential_id=row["credential_id"],
                  relay_key_hash=bytes(row["relay_key_hash"]) if row["relay_key_hash"] is not None else None,
                  principal_kind=row["principal_kind"], principal_id=row["principal_id"],
                  policy_id=row["policy_id"], project_id=row["project_id"], team_id=row["team_id"])


def _claimed(row: dict[str, Any], idx: int) -> ClaimedItem:
    return ClaimedItem(batch_id=row["id"], idx=idx, shape=row["shape"], policy_id=row["policy_id"],
                       caller=caller_from_row(row), model=row["model"], custom_id=row["custom_id"],
                       started=row["started_at"].timestamp())
