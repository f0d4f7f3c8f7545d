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
    available = max(0.0, released - used)
    if items <= available:
        return 0.0
    need = items - available
    later_here = max(0.0, capacity - max(float(used), released))
    if need <= later_here:
        return need / rate
    full, last = divmod(need - later_here, capacity)
    if not last:
        return (end - now) + full * window - RELEASE_LEAD_S
    return (end - now) + full * window + max(0.0, last / rate - RELEASE_LEAD_S)


def expected_seconds(policy: Policy, items: int, used: Mapping[UUID, int], now: float | None = None,
                     tokens_per_item: float | None = None) -> float:
    """How long ITEMS batch items of POLICY take at its batch share (0 without limits; inf when a limit admits
    no batch item): the slowest of its limits. USED: the batch share already spent in each limit's window."""
    now = time.time() if now is None else now
    return max((seconds_under(limit, items, policy.batch_share, used.get(limit.id, 0), now, tokens_per_item)
                for limit in policy.rate_limits), default=0.0)


def items_per_minute(policy: Policy, tokens_per_item: float | None = None) -> float | None:
    """The long-run batch rate POLICY's limits allow at its share (None: no limit bounds it)."""
    rates = [capacity * 60.0 / limit.window_s for limit in policy.rate_limits
             if (capacity := limit_capacity(limit, policy.batch_share, tokens_per_item)) is not None]
    return min(rates) if rates else None


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
                now: float | None = None) -> dict[str, Any] | None:
    """The `pacing` member of a paced batch's object: share, rate, expected finish, and whether that is past the
    batch's deadline (its completion_window). None for batches of policies that are not paced."""
    if policy is None or not policy.batch_pace:
        return None
    now = time.time() if now is None else now
    seconds = expected_seconds(policy, remaining, used, now)
    finish = None if math.isinf(seconds) else now + seconds
    rate = items_per_minute(policy)
    return {"paced": True, "share": policy.batch_share,
            "items_per_minute": None if rate is None else round(rate, 3),
            "expected_finish_at": finish, "waiting_items": remaining,
            "past_deadline": deadline is not None and (finish is None or finish > deadline)}
