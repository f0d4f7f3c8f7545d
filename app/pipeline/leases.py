"""Rate-limit leases: the slice of one window of one limit that this process holds, how big the next slice should
be, and the one statement that hands slices out (app/migrations/0015_rate_limit_leases.sql `relay_take_lease`).

A slice covers about LEASE_HORIZON_S of this process's recent demand (at least MIN_SLICE requests), but never more
than 1/SHRINK of what is left of the window above its tail; in the tail (the last TAIL_FRACTION of the limit, at
least TAIL_MIN requests) a statement asks for exactly what waiting requests need, so no process sits on unused
requests while others are refused. See docs/architecture.md, "Rate limits".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

from app.catalog.model import RateLimit

LEASE_HORIZON_S = 0.5  # a slice covers about this much of the process's recent demand
MIN_SLICE = 20  # requests per slice at least (cheap: <= 1 statement per MIN_SLICE admissions at steady state)
SHRINK = 8  # a slice is at most 1/SHRINK of what is left above the tail
TAIL_FRACTION = 0.01  # the tail of a window: grants are exactly what waiting requests need
TAIL_MIN = 16
RELEASE_LEAD_S = 1.0  # a paced batch's budget is released this far ahead of its share of the window's time
LINEAR_RELEASE_MAX_S = 3600  # windows up to this long release a paced batch's share over the window's time

LeaseKey = tuple[UUID, float, bool]  # limit id, window start (epoch seconds), batch consumer


@dataclass
class Demand:
    """What one consumer of one limit asked for lately in this process: admissions per second and tokens per
    request (moving averages, kept across windows)."""

    rate: float = 0.0
    tokens_per_request: float = 0.0
    admitted: int = 0  # since the last statement
    since: float = 0.0  # monotonic time of the last statement

    def rate_at(self, now: float) -> float:
        """The admission rate, updated with what was admitted since the last statement."""
        elapsed = now - self.since
        if self.since and elapsed > 0:
            self.rate = 0.5 * self.rate + 0.5 * (self.admitted / elapsed)
        self.admitted, self.since = 0, now
        return self.rate

    def note_tokens(self, tokens: int) -> None:
        t = self.tokens_per_request
        self.tokens_per_request = float(tokens) if t == 0 else 0.8 * t + 0.2 * tokens


@dataclass
class Lease:
    """This process's slice of one window: admissions left, its token balance (negative once requests used more
    tokens than were leased: repaid with the next statement), and the window as the last statement saw it."""

    limit: RateLimit
    start: float
    batch: bool
    fraction: float = 1.0  # batch consumer: the share of the limit it may be granted (paced: released over time)
    requests: int = 0
    tokens: int = 0
    window_requests: int = 0  # granted in the window, every process, as of the last statement
    window_tokens: int = 0
    window_batch_requests: int = 0
    window_batch_tokens: int = 0
    waiters: int = 0
    pending: bool = False  # a statement for this lease is queued or running
    refused_at: float = -1e9  # monotonic time a statement last could not serve this lease's waiters
    error: BaseException | None = None  # the last statement failed (waiters raise it)
    last_slice: int = 0
    last_admit: float = 0.0
    sent: dict[str, int] = field(default_factory=dict)  # what the running statement hands back / repays

    @property
    def key(self) -> LeaseKey:
        return self.limit.id, self.start, self.batch

    @property
    def end(self) -> float:
        return self.start + self.limit.window_s

    def can_admit(self) -> bool:
        if self.limit.requests is not None and self.requests < 1:
            return False
        return self.limit.tokens is None or self.tokens > 0

    def remaining_requests(self) -> int | None:
        """Requests of the window not yet granted to anyone, for this consumer (None: no request limit)."""
        return self._remaining(self.limit.requests, self.window_requests, self.window_batch_requests)

    def remaining_tokens(self) -> int | None:
        return self._remaining(self.limit.tokens, self.window_tokens, self.window_batch_tokens)

    def _remaining(self, limit: int | None, granted: int, granted_to_batches: int) -> int | None:
        if limit is None:
            return None
        left = limit - granted
        if self.batch:
            left = min(left, math.floor(limit * self.fraction) - granted_to_batches)
        return max(0, left)


def batch_fraction(limit: RateLimit, start: float, now: float, share: float, paced: bool) -> float:
    """The part of LIMIT a batch consumer may hold now: its share, released over the window's time when paced
    (so a paced batch is spread over the window instead of spending its share in a burst at the start)."""
    if not paced or limit.window_s > LINEAR_RELEASE_MAX_S:
        return share
    return share * min(1.0, (now - start + RELEASE_LEAD_S) / limit.window_s)


def wanted(lease: Lease, demand: Demand, now: float) -> tuple[int, int]:
    """(requests, tokens) the next statement should ask for."""
    rate = demand.rate_at(now)
    need = lease.waiters
    slice_ = max(MIN_SLICE, math.ceil(rate * LEASE_HORIZON_S))
    want_r = 0 if lease.limit.requests is None else _sized(slice_, need, lease.remaining_requests(),
                                                            lease.limit.requests)
    want_t = 0
    if lease.limit.tokens is not None and (lease.tokens <= 0 or low_water(lease, demand)):
        per = max(1, math.ceil(demand.tokens_per_request))
        want_t = _sized(per * slice_, per * max(need, 1), lease.remaining_tokens(), lease.limit.tokens)
    return want_r, want_t


def low_water(lease: Lease, demand: Demand) -> bool:
    """Whether the lease is low enough that the next slice should be taken now, before anyone has to wait."""
    mark = max(1, lease.last_slice // 4)
    if lease.limit.requests is not None and lease.requests <= mark:
        return True
    return lease.limit.tokens is not None and lease.tokens <= mark * max(1.0, demand.tokens_per_request)


def _sized(slice_: int, need: int, remaining: int | None, limit: int | None) -> int:
    """A slice of SLICE_ (at least NEED) within the shrink rule; exactly NEED in the window's tail."""
    if remaining is None or limit is None:
        return max(slice_, need)
    tail = max(TAIL_MIN, math.ceil(limit * TAIL_FRACTION))
    if remaining <= tail:
        return need
    return max(need, min(slice_, max(1, (remaining - tail) // SHRINK)))


_TAKE = """
SELECT t.n, l.granted_requests, l.granted_tokens, l.window_requests, l.window_tokens, l.window_batch_requests,
       l.window_batch_tokens
FROM unnest(%s::uuid[], %s::timestamptz[], %s::bool[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
            %s::bigint[], %s::bigint[], %s::float8[]) WITH ORDINALITY
     AS t(limit_id, start, batch, want_r, want_t, ret_r, ret_t, repay, balance, fraction, n)
CROSS JOIN LATERAL relay_take_lease(t.limit_id, t.start, t.batch, t.want_r, t.want_t, t.ret_r, t.ret_t, t.repay,
                                    t.balance, t.fraction) AS l
ORDER BY t.n
"""

Ask = tuple[Lease, int, int, int, int, int]  # lease, want requests, want tokens, return requests, return tokens, repay


def take(conn: Connection[Any], asks: Sequence[Ask]) -> list[tuple[int, int, int, int, int, int]]:
    """One statement for every ask (in a fixed order, so concurrent statements lock windows alike): per ask,
    (granted requests, granted tokens, window requests, window tokens, window batch requests, batch tokens)."""
    columns: list[list[Any]] = [[] for _ in range(10)]
    for lease, want_r, want_t, ret_r, ret_t, repay in asks:
        balance = max(0, lease.tokens) if lease.limit.tokens is not None else 0
        values = (lease.limit.id, datetime.fromtimestamp(lease.start, tz=UTC), lease.batch, want_r, want_t, ret_r,
                  ret_t, repay, balance, lease.fraction)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(_TAKE, columns)
    rows = {int(r[0]): tuple(int(v) for v in r[1:]) for r in cur.fetchall()}
    return [rows[n + 1] for n in range(len(asks))]  # type: ignore[misc]
