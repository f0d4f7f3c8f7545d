"""Policy rate limits: fixed windows counted in Postgres, so every replica shares them exactly.

A reservation increments the request count of every window of the policy in one transaction, and only
where the count is still under the limit (row locks make concurrent reservations exact). Tokens are
added once the upstream's usage is known and block new requests once the window's token budget is spent.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime

from psycopg import Connection

from app.catalog.model import RateLimit
from app.db import Statement
from app.errors import RateLimited

_RESERVE = """
INSERT INTO rate_limit_windows AS w (limit_id, window_start, requests, tokens)
VALUES (%(limit_id)s, %(window_start)s, 1, 0)
ON CONFLICT (limit_id, window_start) DO UPDATE SET requests = w.requests + 1
WHERE (%(max_requests)s::bigint IS NULL OR w.requests < %(max_requests)s)
  AND (%(max_tokens)s::bigint IS NULL OR w.tokens < %(max_tokens)s)
RETURNING requests, tokens
"""

_ADD_TOKENS = "UPDATE rate_limit_windows SET tokens = tokens + %s WHERE limit_id = %s AND window_start = %s"


@dataclass(frozen=True)
class WindowState:
    limit: RateLimit
    window_start: datetime
    requests: int
    tokens: int

    def reset_at(self) -> float:
        return self.window_start.timestamp() + self.limit.window_s


@dataclass(frozen=True)
class Reservation:
    windows: tuple[WindowState, ...]

    def headers(self) -> dict[str, str]:
        """x-ratelimit-* headers for the tightest request window."""
        return _headers(self.windows)


def window_start(limit: RateLimit, now: float) -> datetime:
    """The start of the fixed window containing NOW (epoch-aligned)."""
    start = math.floor(now / limit.window_s) * limit.window_s
    return datetime.fromtimestamp(start, tz=UTC)


def reserve(conn: Connection, limits: tuple[RateLimit, ...], now: float | None = None) -> Reservation:
    """Count one request against every limit, or none of them and raise RateLimited (429). One limit on an
    autocommit connection is one statement and one round trip; several share a transaction."""
    now = now or time.time()
    states = []
    with conn.transaction() if len(limits) > 1 or not conn.autocommit else nullcontext():
        for limit in limits:
            start = window_start(limit, now)
            row = conn.execute(_RESERVE, {"limit_id": limit.id, "window_start": start,
                                          "max_requests": limit.requests, "max_tokens": limit.tokens}).fetchone()
            if row is None:
                raise _exceeded(limit, start, now)
            states.append(WindowState(limit, start, int(row["requests"]), int(row["tokens"])))  # type: ignore[call-overload]
    return Reservation(tuple(states))


def add_tokens(conn: Connection, reservation: Reservation, tokens: int) -> None:
    """Count TOKENS (from the upstream's usage) in the windows the request was admitted to."""
    for statement in token_statements(reservation, tokens):
        conn.execute(*statement)


def token_statements(reservation: Reservation, tokens: int) -> list[Statement]:
    """The writes add_tokens makes: one per token-limited window (none for zero tokens)."""
    if tokens <= 0:
        return []
    return [(_ADD_TOKENS, [tokens, state.limit.id, state.window_start])
            for state in reservation.windows if state.limit.tokens is not None]


def _exceeded(limit: RateLimit, start: datetime, now: float) -> RateLimited:
    retry_after = max(1, math.ceil(start.timestamp() + limit.window_s - now))
    what = f"{limit.requests} requests" if limit.requests is not None else ""
    if limit.tokens is not None:
        what = f"{what} / {limit.tokens} tokens".strip(" /")
    headers = {"Retry-After": str(retry_after), "x-ratelimit-reset-requests": f"{retry_after}s",
               "x-ratelimit-remaining-requests": "0"}
    if limit.requests is not None:
        headers["x-ratelimit-limit-requests"] = str(limit.requests)
    return RateLimited("rate_limited", f"rate limit exceeded: {what} per {limit.window_s}s; retry after {retry_after}s",
                       headers=headers)


def _headers(windows: tuple[WindowState, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    req = [w for w in windows if w.limit.requests is not None]
    if req:
        tight = min(req, key=lambda w: (w.limit.requests or 0) - w.requests)
        out["x-ratelimit-limit-requests"] = str(tight.limit.requests)
        out["x-ratelimit-remaining-requests"] = str(max(0, (tight.limit.requests or 0) - tight.requests))
        out["x-ratelimit-reset-requests"] = f"{max(0, math.ceil(tight.reset_at() - time.time()))}s"
    tok = [w for w in windows if w.limit.tokens is not None]
    if tok:
        tight = min(tok, key=lambda w: (w.limit.tokens or 0) - w.tokens)
        out["x-ratelimit-limit-tokens"] = str(tight.limit.tokens)
        out["x-ratelimit-remaining-tokens"] = str(max(0, (tight.limit.tokens or 0) - tight.tokens))
    return out


