"""The outbox pump: publishes committed-but-unpublished items through this process's publisher (the port in
publisher.py; RabbitMQ's, built by the worker: actors/publisher.py), a few items of one batch per message,
keeping what is published but not final within a window sized from the workers' live concurrency. It runs as a
thread in every worker process (one publishes at a time, under an advisory lock), woken by NOTIFY on submit and by
local items finishing, and polling every second (every pacing.PACE_STEP_S while a paced batch waits for its
budget), so an API that died right after committing a batch loses nothing.
Publishing twice is harmless: the item claim dedupes.

Order of work (fair share, planned by app/batches/scheduler.py): each pass splits the room in the window between
the owners with items left to publish (the credential that submitted, or the user for tokens) in proportion to
their policies' `batch_weight` (default 1: equal shares), then between one owner's batches, oldest first; messages
are interleaved across owners. A paced policy's budget is split the same way first, by what each owner started
since it began waiting (scheduler.PacedShares). So a new owner's batch is published at the next pass, behind at
most one window of other owners' items, however large their backlog; and the window holds the message each live
worker thread runs plus a lead of at most one more message or LEAD_S of work (see window()), so that is a fraction
of a second of work.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from app.access.cache import get_catalog
from app.batches import outbox, pacing
from app.batches.publisher import Publisher
from app.batches.scheduler import PacedShares, Publication, plan_pass
from app.pipeline.ratelimit import get_limiter
from app.runtime import Runtime

log = logging.getLogger("relay.batches.dispatch")

DISPATCH_LOCK = 0x5E1A7B01  # advisory lock: one publishing dispatcher at a time
MAX_GROUP = 8  # items per message at most
MESSAGE_TARGET_S = 0.25  # items are grouped into messages of about this much wall time (fast items only)
CHUNK = 2000  # items published per pass at most
REFILL_STEPS = 6  # a full window is refilled in about this many passes (measured: bench drain, docs/benchmarks.md)
LEAD_S = 0.1  # the lead behind the running messages shrinks by LEAD_S / a message's time when below 1 (window())
LOST_MESSAGE_AGE_S = 120.0  # a queued item published this long ago, with the queue empty, lost its message
SILENT_PREFETCH_AGE_S = 2.0  # ... or this long ago while a worker is silent: its prefetch may hold the message
RECOVER_EVERY_S = 2.0  # how often the leader looks for such items
SPREAD_PARTS = 4  # a pass's paced messages are published in this many parts spread over pacing.PACE_STEP_S
SILENT_FORGET_S = 600.0  # a worker silent longer than this is gone, and RabbitMQ gave its messages back long ago


class Dispatcher:
    """A daemon thread that pumps the outbox into PUBLISHER (this process's, used by this thread only); `wake()`
    makes it look now."""

    def __init__(self, runtime: Runtime, publisher: Publisher, *, item_seconds: Callable[[], float] = lambda: 0.0,
                 poll_s: float = 1.0) -> None:
        self.runtime = runtime
        self._item_seconds = item_seconds  # how long an item takes here lately (wall time)
        self.publisher = publisher
        self.max_window = runtime.settings.dispatch_window
        self._poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-dispatcher", daemon=True)
        self._passes = 0
        self._starts = pacing.StartBudget()  # paced policies' items published at their share's rate
        self._paced_shares = PacedShares()  # ... and split fairly between the owners waiting on each
        self._paced_held = False  # the last pass left paced items for later: pass again in pacing.PACE_STEP_S
        self._window_full = False  # the last pass stopped at the window: finishing items should wake us
        self._refill = 16  # finished local items that make a pass worth it while the window is full
        self._finished = 0
        self._next_recovery = time.monotonic() + RECOVER_EVERY_S

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def item_finished(self) -> None:
        """A local item became final: wake only if the window held publishing back and has room for a step."""
        if self._window_full:
            self._finished += 1
            if self._finished >= self._refill:
                self._finished = 0
                self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._cycle()
                backoff = 0.5
            except Exception as exc:  # broker or database trouble: drop the connection, retry with backoff
                log.warning("dispatcher: %s: %s (retrying in %.1fs)", type(exc).__name__, exc, backoff)
                self.publisher.close()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        self.publisher.close()

    def _cycle(self) -> None:
        """Publish until the outbox is empty or the window is full, then sleep until woken or the poll (or, while
        paced items wait, until pacing.PACE_STEP_S has passed since the pass began)."""
        began = time.monotonic()
        while not self._stop.is_set() and self.pump() >= CHUNK:
            pass
        self._passes += 1
        if time.monotonic() >= self._next_recovery:
            self._next_recovery = time.monotonic() + RECOVER_EVERY_S
            self.recover_lost_messages()
        self.publisher.idle()  # e.g. keep the AMQP heartbeat answered
        self._wake.wait(max(0.0, pacing.PACE_STEP_S - (time.monotonic() - began)) if self._paced_held
                        else self._poll_s)
        self._wake.clear()
        self._stop.wait(0.01)  # let a burst of wake-ups coalesce into one pass

    def window(self, threads: int, backlog: int, processes: int = 1) -> tuple[int, int]:
        """(window, items per message). Every live thread gets the message it runs, plus a lead queued behind it:
        one more message and one item of slack, scaled by LEAD_S / a message's time when messages take longer than
        LEAD_S (a slow upstream: the lead only has to cover a refill pass, and whatever is queued is what a new
        owner's first items wait behind). Capped by RELAY_DISPATCH_WINDOW. (A lead of less than one message a
        thread on fast items left too few items in flight for policy weights to show: tests/batches/
        test_fair_share.py.) Items are grouped only when they are known to be fast (about MESSAGE_TARGET_S of wall
        time a message: an item's wall time on busy cores is mostly its wait for the CPU, ~30 ms for a zero-latency
        item among 32 threads on 2 cores, where 50 ms made one or two items a message and a claim, a delivery and
        an ack for each) and the backlog is deep: until an item has finished here, one item a message (a slow
        upstream then never leaves a thread holding several seconds of queued work). Also sets the refill step: a pass
        costs a few queries, so the next one waits until about 1/REFILL_STEPS of the window, and at most half the
        lead, is final, counted by this process's own finishes (about 1/PROCESSES of all)."""
        threads, processes = max(threads, 1), max(processes, 1)
        item_s = self._item_seconds()
        by_time = int(MESSAGE_TARGET_S / max(item_s, 1e-3)) if item_s > 0 else 1
        group = max(1, min(MAX_GROUP, by_time, backlog // (4 * threads)))
        share = 1.0 if item_s <= 0 else min(1.0, LEAD_S / (item_s * group))
        lead = math.ceil((threads * group + threads) * share)
        window = min(self.max_window, threads * group + lead)
        self._refill = max(1, min(window // (REFILL_STEPS * processes), lead // (2 * processes)))
        return window, group

    def pump(self) -> int:
        """One pass: publish up to CHUNK items within the window; how many were published."""
        settings = self.runtime.settings
        self._paced_held = False
        with self.runtime.pool.connection() as conn, conn.transaction():
            if not outbox.try_leader_lock(conn, DISPATCH_LOCK):
                return 0
            batches, paced = self._paced(conn, outbox.outbox_batches(conn))
            if not batches:
                self._window_full = False
                return 0
            backlog = sum(b["total"] - b["published_upto"] for b in batches)
            threads, processes = outbox.live_workers(conn, settings.worker_lost_after_s)
            window, group = self.window(threads, backlog, processes)
            flying = outbox.in_flight(conn)
            free = window - sum(flying.values())
            room = min(CHUNK, free)
            if room <= 0:
                self._window_full = True
                return 0
            messages, cursors = plan_pass(batches, room, group, flying)
            self.publisher.publish([m for m in messages if m.batch_id not in paced])
            self._spread([m for m in messages if m.batch_id in paced])
            outbox.advance(conn, cursors)
        published = sum(len(m.idxs) for m in messages)
        # The window, not the backlog, stopped this pass: items finishing here must wake the next one (the poll
        # alone would leave the workers idle for up to a second after they drain what was published).
        self._window_full = published >= free
        return published

    def _spread(self, messages: list[Publication]) -> None:
        """Publish a pass's paced MESSAGES in SPREAD_PARTS parts over pacing.PACE_STEP_S, in order: a step's items
        all reaching the workers at once (and their upstream calls, and their final writes) took the CPU that live
        calls of the same policy needed, in bursts that showed in their p99."""
        parts = min(len(messages), SPREAD_PARTS)
        for part in range(parts):
            if part:
                self._stop.wait(pacing.PACE_STEP_S / parts)
            self.publisher.publish(messages[part * len(messages) // parts:(part + 1) * len(messages) // parts])

    def _paced(self, conn: Any, batches: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[UUID]]:
        """BATCHES with those of paced policies cut to what their limits let start now (pacing.publishable, less
        what is published and not started yet), so their items do not wait in worker threads for budget, and to
        their share's steady rate (pacing.StartBudget), so budget released before they came is not one burst;
        split fairly between the owners waiting on each policy (scheduler.PacedShares); and the ids of those
        batches."""
        policies = get_catalog(self.runtime).snapshot().policies
        paced = {b["policy_id"]: policy for b in batches if (policy := policies.get(b["policy_id"])) is not None
                 and policy.batch_pace and policy.rate_limits}
        paced_ids = {b["id"] for b in batches if b["policy_id"] in paced}
        if not paced:
            return batches, paced_ids
        now = time.time()
        windows = pacing.current_windows(conn, [limit for p in paced.values() for limit in p.rate_limits], now)
        started = outbox.paced_unstarted(conn, list(paced))
        limiter = get_limiter(self.runtime)
        room = {policy_id: pacing.publishable(policy, windows, now, limiter.token_estimate)
                - started.get(policy_id, 0) for policy_id, policy in paced.items()}
        for policy_id, policy in paced.items():
            rate = pacing.steady_rate(policy, limiter.token_estimate)
            if rate is not None:
                room[policy_id] = min(room[policy_id], self._starts.allowance(policy_id, rate, time.monotonic()))
        kept = [batch for batch in batches if batch["policy_id"] not in paced]
        for policy_id in paced:
            cut = self._paced_shares.split(policy_id, max(0, room[policy_id]),
                                           [b for b in batches if b["policy_id"] == policy_id])
            self._starts.spend(policy_id, sum(b["total"] - b["published_upto"] for b in cut))
            self._paced_held |= sum(b["total"] for b in cut) < sum(b["total"] for b in batches
                                                                   if b["policy_id"] == policy_id)
            kept += cut
        return kept, paced_ids

    def recover_lost_messages(self) -> None:
        """Publish again queued items whose message is long gone (the queue is empty yet they never ran), or, while
        a worker process is silent (stopped, paused, or dead and not yet noticed by RabbitMQ), those published
        SILENT_PREFETCH_AGE_S ago: its prefetch may hold them, and another worker runs them within seconds instead of
        after the broker's heartbeat (the claim makes the copy that comes second a no-op)."""
        if self.publisher.depth():
            return
        settings = self.runtime.settings
        with self.runtime.pool.connection() as conn, conn.transaction():
            if not outbox.try_leader_lock(conn, DISPATCH_LOCK):
                return
            silent = outbox.silent_workers(conn, 2 * settings.worker_heartbeat_s + 1.0, SILENT_FORGET_S)
            keys = outbox.stranded_items(conn, SILENT_PREFETCH_AGE_S if silent else LOST_MESSAGE_AGE_S)
            if keys:
                log.warning("dispatcher: publishing again %d queued item(s) whose messages were lost%s", len(keys),
                            f" or are held by {silent} silent worker(s)" if silent else "")
                self.publisher.publish([Publication(b, (i,)) for b, i in keys])
                outbox.touch_published(conn, sorted({b for b, _ in keys}))
