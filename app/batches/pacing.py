"""Pacing: how fast a policy's limits let its batch items run, and when a batch is expected to finish at that rate.

A paced policy (`batch: {pace: true, share: S}`) starts batch items only within S of each rate limit (app/pipeline/
ratelimit.py leases them as the `batch` consumer; windows of up to an hour release that share over the window's
time), so a batch takes as long as its limits require. These estimates assume the batch has the policy's batch
share to itself and that the workers keep up; the answer says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from psycopg import Connection

from app.catalog.model import Policy, RateLimit
from app.pipeline.leases import LINEAR_RELEASE_MAX_S, RELEASE_LEAD_S, batch_fraction
from app.pipeline.ratelimit import window_start

CATCH_UP_S = 2.0  # a paced policy's items start at its share's rate: budget its windows released unused (before the
# batch came, or while it waited) is carried this long at most, so a batch submitted mid-window does not start the
# window's elapsed share in one burst (which delayed live calls of the policy meanwhile)
PACE_STEP_S = 0.1  # ... and it is published in small steps: the dispatcher passes this often while a paced batch
# waits, each pass publishing at most CATCH_UP_PACE steps of the rate (one pass a second published a second of
# budget at once: 80 items reaching the worker threads together added 27 ms to the p99 of live calls beside them)
CATCH_UP_PACE = 2.0  # carried budget is spent at most at this multiple of the steady rate


def limit_capacity(limit: RateLimit, share: float, tokens_per_item: float | None) -> int | None:
    """Batch items LIMIT lets through per window at SHARE (None: LIMIT does not bound them)."""
    caps = []
    if limit.requests is not None:
        caps.append(math.floor(limit.requests * share))
    if limit.tokens is not None and tokens_per_item:
        caps.append(math.floor(limit.tokens * share / tokens_per_item))
    return min(caps) if caps else None


def seconds_under(limit: RateLimit, items: int, share: float, used: int, now: float,
                  tokens_per_item: float | None = None) -> float:
    """How long ITEMS batch items take under one LIMIT when USED of its batch share is spent in the current window.
    A window of up to an hour releases its share over its time (RELEASE_LEAD_S ahead); a longer one gives its
    whole share at its start."""
    capacity = limit_capacity(limit, share, tokens_per_item)
    if capacity is None or items <= 0:
        return 0.0
    if capacity <= 0:
        return math.inf
    start = window_start(limit, now)
    end, window = start + limit.window_s, float(limit.window_s)
    if limit.window_s > LINEAR_RELEASE_MAX_S:
        left_now = max(0, capacity - used)
        if items <= left_now:
            return 0.0
        return (end - now) + (math.ceil((items - left_now) / capacity) - 1) * window
    rate = capacity / window
    released = capacity * min(1.0, (now - start + RELEASE_LEAD_S) / window)
    carried = min(max(0.0, released - used), rate * CATCH_UP_S)  # what StartBudget carries, spent at CATCH_UP_PACE
    caught_up = carried * CATCH_UP_PACE / (CATCH_UP_PACE - 1)  # items started by the time it is spent
    if items <= caught_up:
        return items / (rate * CATCH_UP_PACE)
    return max(0.0, used - released) / rate + (items - carried) / rate


def expected_seconds(policy: Policy, items: int, used: Mapping[UUID, int], now: float | None = None,
                     tokens_per_item: float | None = None, part: float = 1.0) -> float:
    """How long ITEMS batch items of POLICY take at its batch share (0 without limits; inf when a limit admits
    no batch item): the slowest of its limits. USED: the batch share already spent in each limit's window. PART:
    the part of that share these items get (fair share beside other owners waiting: fair_part)."""
    now = time.time() if now is None else now
    seconds = max((seconds_under(limit, items, policy.batch_share, used.get(limit.id, 0), now, tokens_per_item)
                   for limit in policy.rate_limits), default=0.0)
    return seconds / part if part > 0 else math.inf


def fair_part(other_owners: int) -> float:
    """The part of a paced policy's share an owner gets while OTHER_OWNERS wait on it too (one policy: the same
    batch_weight for all of them, so equal parts; app/batches/scheduler.py)."""
    return 1.0 / (1 + max(0, other_owners))


def items_per_minute(policy: Policy, tokens_per_item: float | None = None) -> float | None:
    """The long-run batch rate POLICY's limits allow at its share (None: no limit bounds it)."""
    rates = [capacity * 60.0 / limit.window_s for limit in policy.rate_limits
             if (capacity := limit_capacity(limit, policy.batch_share, tokens_per_item)) is not None]
    return min(rates) if rates else None


def steady_rate(policy: Policy, tokens_per_item: Callable[[UUID], float]) -> float | None:
    """Batch items a second that POLICY's windows of up to an hour release at its share (None: none bounds them;
    a longer window gives its share at its start)."""
    rates = [capacity / limit.window_s for limit in policy.rate_limits if limit.window_s <= LINEAR_RELEASE_MAX_S
             and (capacity := limit_capacity(limit, policy.batch_share, tokens_per_item(limit.id) or None))
             is not None]
    return min(rates) if rates else None


class StartBudget:
    """The dispatcher's even start of paced policies' items: per policy, a bucket filled at its steady rate and at
    most CATCH_UP_S of it deep, spent through a second one filled at CATCH_UP_PACE times the rate and one pass's
    step deep (CATCH_UP_PACE * PACE_STEP_S of the rate): never more than a step at once, however often the
    dispatcher passes (the windows' own release still bounds what starts)."""

    def __init__(self) -> None:
        self._buckets: dict[UUID, tuple[float, float, float]] = {}  # policy id: (items it may start, of them at
        # once, when counted)

    def allowance(self, policy_id: UUID, rate: float, now: float) -> int:
        """How many items of POLICY_ID may start now at RATE items a second."""
        depth, step = max(1.0, rate * CATCH_UP_S), max(1.0, rate * PACE_STEP_S * CATCH_UP_PACE)
        tokens, pace, since = self._buckets.get(policy_id, (depth, step, now))
        elapsed = max(0.0, now - since)
        tokens, pace = min(depth, tokens + elapsed * rate), min(step, pace + elapsed * rate * CATCH_UP_PACE)
        self._buckets[policy_id] = (tokens, pace, now)
        return math.floor(min(tokens, pace))

    def spend(self, policy_id: UUID, items: int) -> None:
        """ITEMS of POLICY_ID were published to start."""
        tokens, pace, since = self._buckets.get(policy_id, (0.0, 0.0, 0.0))
        self._buckets[policy_id] = (tokens - items, pace - items, since)


def current_windows(conn: Connection[Any], limits: Sequence[RateLimit],
                    now: float | None = None) -> dict[UUID, dict[str, int]]:
    """The current window of each limit as granted so far (every replica): requests, tokens, and their batch part."""
    now = time.time() if now is None else now
    if not limits:
        return {}
    rows = conn.execute(
        "SELECT w.limit_id, w.requests, w.tokens, w.batch_requests, w.batch_tokens FROM rate_limit_windows w"
        " JOIN unnest(%s::uuid[], %s::float8[]) AS t(id, start) ON w.limit_id = t.id"
        " AND w.window_start = to_timestamp(t.start)",
        ([limit.id for limit in limits], [window_start(limit, now) for limit in limits])).fetchall()
    return {r["limit_id"]: {k: int(r[k]) for k in ("requests", "tokens", "batch_requests", "batch_tokens")}
            for r in rows}


def batch_share_used(conn: Connection[Any], limits: Sequence[RateLimit], now: float | None = None) -> dict[UUID, int]:
    """What batch items were granted so far in the current window of each limit (every replica)."""
    return {limit_id: w["batch_requests"] for limit_id, w in current_windows(conn, limits, now).items()}


def publishable(policy: Policy, windows: Mapping[UUID, Mapping[str, int]], now: float,
                tokens_per_item: Callable[[UUID], float], *, paced: bool = True) -> int:
    """How many more batch items of a paced POLICY its limits let start now (the share released so far, minus
    what was granted; for a token limit, by the tokens an item took lately): what the dispatcher may publish.
    PACED false: what they let start now without pacing (the whole share at once; the rest is refused)."""
    rooms = []
    for limit in policy.rate_limits:
        fraction = batch_fraction(limit, window_start(limit, now), now, policy.batch_share, paced)
        window = windows.get(limit.id, {})
        if limit.requests is not None:
            rooms.append(min(math.floor(limit.requests * fraction) - window.get("batch_requests", 0),
                             limit.requests - window.get("requests", 0)))
        per = tokens_per_item(limit.id)
        if limit.tokens is not None and per > 0:
            left = min(math.floor(limit.tokens * fraction) - window.get("batch_tokens", 0),
                       limit.tokens - window.get("tokens", 0))
            rooms.append(math.floor(left / per))
    return max(0, min(rooms)) if rooms else 1 << 30


def pacing_view(policy: Policy | None, remaining: int, used: Mapping[UUID, int], deadline: float | None,
                now: float | None = None, *, others: int = 0, ahead: int = 0) -> dict[str, Any] | None:
    """The `pacing` member of a paced batch's object: share, rate, expected finish, and whether that is past the
    batch's deadline (its completion_window). OTHERS: other owners waiting on the policy (they share its budget
    fairly); AHEAD: items of the owner's older batches of the policy, which start first. None for batches of
    policies that are not paced."""
    if policy is None or not policy.batch_pace:
        return None
    now = time.time() if now is None else now
    part = fair_part(others)
    seconds = expected_seconds(policy, ahead + remaining, used, now, part=part)
    finish = None if math.isinf(seconds) else now + seconds
    rate = items_per_minute(policy)
    return {"paced": True, "share": policy.batch_share,
            "items_per_minute": None if rate is None else round(rate, 3),
            "expected_finish_at": finish, "waiting_items": remaining, "fair_part": round(part, 3),
            "items_ahead": ahead,
            "past_deadline": deadline is not None and (finish is None or finish > deadline)}
