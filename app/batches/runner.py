"""Run batch items: claim each, check credential and policy, load its request, call the pipeline, keep the
response, and hand the item's final state with its one usage record to the writer. Never raises for an item
failure: the error belongs in Postgres, not in a dead-letter queue.

A message carries a few items of one batch; they run one after another on the thread that took the message, each
claimed only when it starts (so a killed worker loses at most the items it was running, and `started_at` is true).
Their final states are committed by the process's group writer, and the message is acknowledged only once they are.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import PoolTimeout

from app.auth import get_policy, recheck_caller
from app.auth_model import Caller
from app.batches import capped, lifecycle, outcomes, store, unclaimed
from app.batches.finals import item_event
from app.batches.lifecycle import ItemFinal
from app.batches.outcomes import Outcome
from app.batches.registry import ItemRegistry
from app.db import autocommit
from app.errors import RelayError
from app.observability.metrics import observe_item
from app.payload_port import PayloadMissing, PayloadStore, PayloadStoreUnavailable
from app.pipeline import run_inference
from app.pipeline.calls import AllKeysFailed, NoKeyAvailable
from app.pipeline.interrupt import Interrupted, Interrupter
from app.pipeline.keyhealth import get_key_health
from app.pipeline.keypool import cooldown_left
from app.pipeline.ratelimit import LimiterUnavailable, Reservation, get_limiter
from app.pipeline.routing import PolicyUnavailable, check_policy
from app.pipeline.types import InferenceCall
from app.runtime import Runtime
from app.usage.writer import GroupWriter, UsageRecord

log = logging.getLogger("relay.batches.runner")
CLAIM_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between attempts to claim an item
UNSENT_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # a claimed item the database failed before it reached the upstream
FINAL_WAIT_S = 120.0  # how long a message waits for its items' final states to commit
COOLDOWN_STEP_S = 1.0  # a paced item waiting for a key out of its breaker's cool-down looks again this often


_UNKNOWN: Any = object()


@dataclass
class WorkerContext:
    """What a worker process shares between its item threads and its background threads."""

    runtime: Runtime
    worker_id: str
    payloads: PayloadStore
    writer: GroupWriter
    threads: int = 8  # items this process runs at once
    registry: ItemRegistry = field(default_factory=ItemRegistry)
    stopping: threading.Event = field(default_factory=threading.Event)  # graceful stop: start no new item
    item_seconds: float = 0.0  # moving average of an item's wall time here (the dispatcher sizes messages by it)
    finished: list[Any] = field(default_factory=list)  # callbacks run as items become final (the dispatcher)
    cancelled: set[UUID] = field(default_factory=set)  # batches this process heard cancelled (paced waits stop)
    waiting: int = 0  # items of paced batches waiting here for their rate limits' budget
    judges: Callable[[], bool] = lambda: True  # whether it may judge another worker lost (monitor.Heartbeat.steady)
    _batches: dict[UUID, dict[str, Any] | None] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads_seen: int = 0

    @classmethod
    def create(cls, runtime: Runtime, worker_id: str, *, payloads: PayloadStore | None = None,
               threads: int = 8) -> WorkerContext:
        """A context with its group writer (syncing PAYLOADS, by default the runtime's store, before each commit)."""
        from app.payload_backends import payload_store

        payloads = payloads or payload_store(runtime)
        writer = GroupWriter(runtime.pool, counter=worker_id, before_commit=payloads.sync, unsynced=unsynced,
                             then_claim=lambda conn, keys: lifecycle.claim_items(conn, keys, worker_id, worker_id),
                             finals=lifecycle.GROUP_FINALS)
        return cls(runtime=runtime, worker_id=worker_id, payloads=payloads, writer=writer, threads=threads)

    def thread_counter(self) -> str:
        """The batch_progress row this thread's claims count in: one per thread, so that claims (each holding its
        row until its commit is flushed) never queue on each other; the group writer counts in the process's."""
        name = getattr(self._local, "counter", None)
        if name is None:
            with self._lock:
                self._threads_seen += 1
                name = self._local.counter = f"{self.worker_id}#{self._threads_seen}"
        return name  # type: ignore[no-any-return]

    def batch_info(self, batch_id: UUID) -> dict[str, Any] | None:
        """A batch's policy id and deadline (read once per batch: they never change), None if it is gone."""
        found = self._batches.get(batch_id, _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        with self.runtime.pool.connection() as conn:
            found = store.batch_run_info(conn, batch_id)
        if len(self._batches) > 1000:
            self._batches.clear()
        self._batches[batch_id] = found
        return found

    def on_finalized(self) -> None:
        for callback in self.finished:
            callback()


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


@dataclass
class _Ending:
    """What running an item produced: its outcome, the pipeline's usage record, where its response is kept."""

    outcome: Outcome
    record: UsageRecord | None = None
    response: tuple[str, int, int] | None = None


@dataclass(frozen=True)
class Claimed:
    """An item claimed already (with its predecessor's final state), registered here with its interrupter."""

    idx: int
    row: dict[str, Any]
    interrupter: Interrupter
    admitted: Reservation | None = None


Then = Callable[[], "tuple[int, Future[Any]] | None"]  # asked once the item ran: the next item to claim with it


def run_item(ctx: WorkerContext, batch_id: UUID, idx: int, admitted: Reservation | None = None,
             *, claimed: Claimed | None = None, then: Then | None = None,
             claimed_since: float | None = None) -> str:
    """Run item IDX of BATCH_ID once and wait for its final state to commit; the state (or why nothing ran).
    ADMITTED: the item's admission to the rate limits, taken before its claim (paced policies). CLAIMED: the item
    was claimed already. THEN: what to claim in the final state's transaction (app/batches/messages.py).
    CLAIMED_SINCE: this worker's claim of the item may have committed unseen since then (lifecycle.ClaimRetries)."""
    state, future = _run_one(ctx, batch_id, idx, admitted, claimed, then, claimed_since)
    if future is None:
        return state
    try:
        return future.result(FINAL_WAIT_S) or "duplicate"
    except Exception as exc:  # left running: the reaper settles it once its time limit is long past
        log.error("a batch item's final state was not committed: %s", exc)
        return "unknown"


def _run_one(ctx: WorkerContext, batch_id: UUID, idx: int, admitted: Reservation | None = None,
             claimed: Claimed | None = None, then: Then | None = None,
             claimed_since: float | None = None) -> tuple[str, Future[str | None] | None]:
    """Run item IDX of BATCH_ID once; its final state and the future of its commit (None when nothing ran here).

    The item is registered before the claim, so a cancel committed right after the claim finds it here.
    """
    key = (batch_id, idx)
    if claimed is not None:
        row, interrupter, admitted = claimed.row, claimed.interrupter, claimed.admitted
    else:
        interrupter = Interrupter()
        if not ctx.registry.add(key, interrupter):
            return "duplicate", None  # the same item is running on this worker
    try:
        if claimed is None:
            found, retried, refused = _claim(ctx, batch_id, idx, claimed_since)
            if found is None:
                get_limiter(ctx.runtime).give_back(admitted)
                if refused is not None:
                    return unclaimed.end_unrun(ctx.runtime, ctx.worker_id, batch_id, idx, refused), None
                return unclaimed.settle(ctx.runtime, ctx.worker_id, batch_id, idx, own_claim_unknown=retried,
                                        judge_owners=ctx.judges()), None
            row = found
        item = _claimed(row, idx)
        deadline = time.monotonic() + ctx.runtime.settings.batch_item_time_limit_s
        ctx.registry.set_deadline(key, deadline)
        try:
            ending = _execute(ctx, item, interrupter, deadline, admitted)
        except Exception:
            log.exception("batch item %s:%s failed unexpectedly", batch_id, idx)
            ending = _Ending(_stopped(interrupter) or outcomes.internal_error())
    finally:
        ctx.registry.remove(key)
        interrupter.release()
    took = time.time() - item.started
    observe_item(ending.outcome.state, took)
    ctx.item_seconds = took if not ctx.item_seconds else 0.9 * ctx.item_seconds + 0.1 * took
    future = ctx.writer.finalize(_final(item, ending, ctx.worker_id, then() if then is not None else None))
    ctx.on_finalized()
    return ending.outcome.state, future


def _claim(ctx: WorkerContext, batch_id: UUID, idx: int,
           claimed_since: float | None = None) -> tuple[dict[str, Any] | None, bool, Outcome | None]:
    """queued → running for this worker, retried through a database blip (lifecycle.ClaimRetries, which adopts a
    claim that committed unseen); the claimed row or None, whether it retried, and the outcome of an item of a
    hard-capped batch that must end unrun (app/batches/capped.py claims those)."""
    info = ctx.batch_info(batch_id)
    retries = lifecycle.ClaimRetries((batch_id, idx), ctx.worker_id, CLAIM_RETRIES_S, claimed_since)
    if capped.is_hard(info):
        assert info is not None
        got = capped.claim_capped(ctx.runtime, ctx.payloads, info, (batch_id, idx), worker_id=ctx.worker_id,
                                  counter=ctx.thread_counter(), stopping=ctx.stopping, retries=retries)
        return got.row, retries.retried, got.refused
    while True:
        try:
            with autocommit(ctx.runtime.pool) as conn:  # one statement: no BEGIN/COMMIT round trips
                row = lifecycle.claim_item(conn, batch_id, idx, ctx.worker_id, counter=ctx.thread_counter())
                return retries.adopted(conn, row), retries.retried, None
        except psycopg.OperationalError as exc:
            retries.wait(exc)


def _execute(ctx: WorkerContext, item: ClaimedItem, interrupter: Interrupter, deadline: float,
             admitted: Reservation | None = None) -> _Ending:
    """Everything between the claim and the final state; returns how the item ended instead of raising."""
    early = _precheck(ctx.runtime, item)
    if early is not None:
        return _Ending(early)
    try:
        body = json.loads(ctx.payloads.read_request(item.batch_id, item.idx))
    except (PayloadMissing, ValueError) as exc:
        return _Ending(outcomes.load_input_failed(exc))
    for delay in (*UNSENT_RETRIES_S, None):
        def call_of() -> InferenceCall:
            return InferenceCall(shape=item.shape, body=body, caller=item.caller, policy_id=item.policy_id,
                                 source="batch", request_id=f"{item.batch_id}:{item.idx}", route="/v1/batches",
                                 batch_id=item.batch_id, batch_idx=item.idx, custom_id=item.custom_id,
                                 deadline=deadline, interrupter=interrupter, started_at=item.started,
                                 record_later=True, reservation=admitted)
        call = call_of()
        try:
            return _through_cooldowns(ctx, item, call, call_of, interrupter, deadline)
        except (psycopg.Error, PoolTimeout, LimiterUnavailable) as exc:
            if call.sent or delay is None or time.monotonic() + delay >= deadline or interrupter.reason:
                if isinstance(exc, LimiterUnavailable):
                    return _Ending(_stopped(interrupter) or outcomes.pipeline_rejection(exc), call.pending)
                raise
            log.warning("batch item %s:%s: %s before reaching the upstream; trying again in %.1fs",
                        item.batch_id, item.idx, type(exc).__name__, delay)
            interrupter.rearm()
            interrupter.wait(delay)
    raise AssertionError("unreachable")


class _KeysCooling(Exception):
    """A paced batch's item found no key to send on (every breaker open, or the probe taken), nothing sent."""

    def __init__(self, cause: RelayError, wait: float) -> None:
        super().__init__(cause.message)
        self.cause, self.wait = cause, wait


def _through_cooldowns(ctx: WorkerContext, item: ClaimedItem, call: InferenceCall,
                       call_of: Callable[[], InferenceCall], interrupter: Interrupter, deadline: float) -> _Ending:
    """_call, and for a paced batch's item that found every key cooling down before anything was sent, the same
    call again once a key is back (its breaker's cool-down, in steps of COOLDOWN_STEP_S), within its deadline:
    paced items wait out what waiting fixes, and are never sent twice."""
    while True:
        try:
            return _call(ctx, item, call, interrupter)
        except _KeysCooling as exc:
            wait = min(max(exc.wait, 0.05), COOLDOWN_STEP_S)
            if time.monotonic() + wait >= deadline or interrupter.reason:
                return _Ending(_stopped(interrupter) or outcomes.pipeline_rejection(exc.cause), call.pending)
            interrupter.rearm()
            interrupter.wait(wait)
            call = call_of()


def _cooling(ctx: WorkerContext, item: ClaimedItem, call: InferenceCall, exc: RelayError) -> _KeysCooling | None:
    """EXC as a wait for a key, when the item's batch is paced and nothing was sent (else None: the page's rule)."""
    if call.sent or not isinstance(exc, NoKeyAvailable | AllKeysFailed):
        return None
    policy = get_policy(ctx.runtime, item.policy_id)
    if policy is None or not policy.batch_pace:
        return None
    wait = cooldown_left(get_key_health(ctx.runtime).health, policy)
    return _KeysCooling(exc, COOLDOWN_STEP_S if wait is None else wait)


def _call(ctx: WorkerContext, item: ClaimedItem, call: InferenceCall, interrupter: Interrupter) -> _Ending:
    """The pipeline call of a claimed item and how it ended; a database failure before anything was sent upstream
    is raised (the item is still ours: it can be tried again), and so is a paced item's wait for a key."""
    try:
        result = run_inference(ctx.runtime, call)
    except LimiterUnavailable:
        raise
    except Interrupted as exc:
        return _Ending(_stopped(interrupter) or outcomes.interrupted(exc.reason), call.pending)
    except RelayError as exc:
        if not interrupter.reason and (cooling := _cooling(ctx, item, call, exc)) is not None:
            raise cooling from exc
        return _Ending(_stopped(interrupter) or outcomes.pipeline_rejection(exc), call.pending)
    stopped = _stopped(interrupter)
    if stopped is not None and not (interrupter.reason == "time_limit" and 200 <= result.status < 300):
        return _Ending(stopped, call.pending)  # an answer read whole is kept, though the limit fell meanwhile
    if not 200 <= result.status < 300:
        return _Ending(outcomes.upstream_error(result.status), call.pending)
    return _store_response(ctx, item, result.body or b"", call.pending)


def _precheck(runtime: Runtime, item: ClaimedItem) -> Outcome | None:
    """The batch's policy must still exist and be enabled, and the submitting credential must still work."""
    try:
        check_policy(get_policy(runtime, item.policy_id))
    except PolicyUnavailable as exc:
        return outcomes.policy_stopped(exc)
    try:
        recheck_caller(runtime, item.caller)
    except RelayError as exc:
        return outcomes.credential_stopped(exc)
    return None


def _store_response(ctx: WorkerContext, item: ClaimedItem, body: bytes, record: UsageRecord | None) -> _Ending:
    """Keep the upstream's answer whole (one JSON document on one line, so JSON Lines results stay valid)."""
    try:
        document = json.loads(body)
    except ValueError:
        return _Ending(outcomes.invalid_upstream_response(), record)
    if b"\n" in body or b"\r" in body:
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        ref = ctx.payloads.append_response(item.batch_id, item.idx, body)
    except PayloadStoreUnavailable as exc:
        return _Ending(outcomes.store_failed(exc), record)
    return _Ending(outcomes.completed(), record, (ref.segment, ref.offset, ref.length))


def _stopped(interrupter: Interrupter) -> Outcome | None:
    """The outcome forced by an interrupt (cancel or time limit), if one happened."""
    return outcomes.interrupted(interrupter.reason) if interrupter.reason else None


def _final(item: ClaimedItem, ending: _Ending, worker_id: str,
           then: tuple[int, Future[Any]] | None = None) -> ItemFinal:
    """The item's final state with its one usage record: the pipeline's when the call reached it (carrying the
    outcome's status and code when they differ), else an event with no tokens."""
    outcome, record = ending.outcome, ending.record
    if record is None:
        record = UsageRecord(item_event(item.caller, item.policy_id, item.batch_id, item.idx, item.model, outcome,
                                        started=item.started, custom_id=item.custom_id))
    elif outcome.state != "completed" and record.event.error_code is None:
        record.event.status, record.event.error_code = outcome.status, outcome.error_code
    return ItemFinal(item.batch_id, item.idx, outcome.state, outcome.error, outcome.error_code, record,
                     worker_id=worker_id, response=ending.response, then=then)


def unsynced(final: ItemFinal, exc: Exception) -> ItemFinal:
    """A completed item whose response could not be made durable: discarded, its response not kept."""
    outcome = outcomes.store_failed(exc if isinstance(exc, RelayError) else PayloadStoreUnavailable(message=str(exc)))
    final.record.event.status, final.record.event.error_code = outcome.status, outcome.error_code
    return replace(final, state=outcome.state, error=outcome.error, error_code=outcome.error_code, response=None)


def _claimed(row: dict[str, Any], idx: int) -> ClaimedItem:
    return ClaimedItem(batch_id=row["id"], idx=idx, shape=row["shape"], policy_id=row["policy_id"],
                       caller=Caller.from_row(row), model=row["model"], custom_id=row["custom_id"],
                       started=row["started_at"].timestamp())
