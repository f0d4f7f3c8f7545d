"""Policy rate limits: fixed, epoch-aligned windows shared by every replica, admitted in memory from leases.

Each process holds, per window of each limit and per consumer (live calls, batch items), a lease: a slice of the
window's requests and tokens taken from Postgres in one statement (app/pipeline/leases.py). A request is
admitted when every limit of its policy has a request and a positive token balance left here; the next slice is
taken in the background before the lease runs out, so at steady state no request waits for the database. The
window row counts what was granted, never more than the limit: the requests admitted across every process never
exceed it. Tokens are known only after the call; they are debited from the lease (an estimate at admission,
corrected when the usage is known), and what was spent beyond the lease is repaid with the next statement.
Batch items take their leases as a second consumer, capped at the policy's `batch.share` of each limit.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from psycopg_pool import ConnectionPool

from app.catalog.model import RateLimit
from app.db import autocommit
from app.errors import DatabaseUnavailable, RateLimited
from app.observability.metrics import count_admitted, count_lease_statement
from app.pipeline.leases import Ask, Demand, Lease, LeaseKey, batch_fraction, low_water, take, wanted

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("relay.pipeline.ratelimit")
LEASE_WAIT_S = 10.0  # a request waits at most this long for a slice (the database is slow or away)
REFUSED_RECHECK_S = 0.25  # after a window had no room, refuse at once for this long before asking again
IDLE_RETURN_S = 2.0  # a lease unused this long hands back what it holds
SWEEP_S = 0.5  # how often the keeper looks for idle leases and ended windows
SERVICE = "rate_limiter"


class LimiterUnavailable(DatabaseUnavailable):
    """The database did not hand out a slice in time: nothing was sent upstream."""


@dataclass(frozen=True)
class Reservation:
    """One admission: the leases it drew on with the tokens reserved from each, and its x-ratelimit-* headers."""

    taken: tuple[tuple[Lease, int], ...]
    header_values: tuple[tuple[str, str], ...] = ()

    def headers(self) -> dict[str, str]:
        return dict(self.header_values)


def window_start(limit: RateLimit, now: float) -> float:
    """The start (epoch seconds) of the fixed window of LIMIT containing NOW."""
    return math.floor(now / limit.window_s) * limit.window_s


def get_limiter(runtime: Runtime) -> RateLimiter:
    """This process's limiter (closed, handing back what it holds, by Runtime.close)."""
    return runtime.service(SERVICE, lambda: RateLimiter(runtime.pool))


class RateLimiter:
    """This process's leases and the keeper thread that takes and hands back slices."""

    def __init__(self, pool: ConnectionPool, *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._clock, self._mono = clock, monotonic
        self._cond = threading.Condition()
        self._leases: dict[LeaseKey, Lease] = {}
        self._demand: dict[tuple[UUID, bool], Demand] = {}
        self._due: dict[LeaseKey, Lease] = {}
        self._returning: set[LeaseKey] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.statements = 0  # lease statements run by this process (also a metric)
        self.admitted = 0

    # admission ----------------------------------------------------------------------------------------------

    def admit(self, limits: Sequence[RateLimit], *, batch: bool = False, share: float = 1.0, paced: bool = False,
              timeout: float = LEASE_WAIT_S) -> Reservation:
        """Admit one request against every limit, or none of them: RateLimited (429) when a window has no room for
        this consumer, LimiterUnavailable when no slice came in time."""
        deadline = self._mono() + timeout
        waited = False
        with self._cond:
            while True:
                now = self._clock()
                leases = [self._lease(limit, now, batch, share, paced) for limit in limits]
                short = [lease for lease in leases if not lease.can_admit()]
                if not short:
                    return self._take(leases, now)
                for lease in short:
                    if waited and lease.error is not None:
                        raise LimiterUnavailable(message=f"cannot reach Postgres for a rate limit: {lease.error}")
                    if self._mono() - lease.refused_at < REFUSED_RECHECK_S:
                        raise refusal(lease, now, share, paced)
                if self._mono() >= deadline:
                    raise LimiterUnavailable(message="no rate-limit slice came from Postgres in time")
                for lease in short:
                    lease.waiters += 1
                    self._schedule(lease)
                try:
                    self._cond.wait(min(0.5, max(0.0, deadline - self._mono())))
                finally:
                    for lease in short:
                        lease.waiters -= 1
                waited = True

    def admit_now(self, limits: Sequence[RateLimit], *, batch: bool = False, share: float = 1.0,
                  paced: bool = False) -> Reservation | None:
        """An admission if every lease has room now; None otherwise, without waiting (the leases that lack room
        take their next slice meanwhile, unless their window was refused lately)."""
        with self._cond:
            now = self._clock()
            leases = [self._lease(limit, now, batch, share, paced) for limit in limits]
            short = [lease for lease in leases if not lease.can_admit()]
            if not short:
                return self._take(leases, now)
            for lease in short:
                if self._mono() - lease.refused_at >= REFUSED_RECHECK_S:
                    self._schedule(lease)
            return None

    def settle(self, reservation: Reservation | None, tokens: int) -> None:
        """The call admitted by RESERVATION used TOKENS: correct the estimate taken from each token lease."""
        if reservation is None:
            return
        with self._cond:
            for lease, reserved in reservation.taken:
                if lease.limit.tokens is None:
                    continue
                self._demand_of(lease).note_tokens(tokens)
                if self._leases.get(lease.key) is lease:
                    lease.tokens += reserved - tokens

    def give_back(self, reservation: Reservation | None) -> None:
        """An admission that was not used (the item could not be claimed): its request and tokens return."""
        if reservation is None:
            return
        with self._cond:
            for lease, reserved in reservation.taken:
                if self._leases.get(lease.key) is lease:
                    lease.requests += 1
                    lease.tokens += reserved
            self._cond.notify_all()

    def token_estimate(self, limit_id: UUID, batch: bool = True) -> float:
        """Tokens per request lately, for LIMIT_ID's consumer here (0 when unknown)."""
        with self._cond:
            demand = self._demand.get((limit_id, batch))
            return demand.tokens_per_request if demand else 0.0

    def close(self, timeout: float = 5.0) -> None:
        """Hand back every slice held and repay every debt (a graceful stop strands nothing), then stop."""
        with self._cond:
            for lease in self._leases.values():
                if lease.requests or lease.tokens:
                    self._returning.add(lease.key)
                    self._schedule(lease)
            deadline = self._mono() + timeout
            while (self._due or any(lease.pending for lease in self._leases.values())) and self._mono() < deadline:
                self._cond.wait(0.05)
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _lease(self, limit: RateLimit, now: float, batch: bool, share: float, paced: bool) -> Lease:
        start = window_start(limit, now)
        key = (limit.id, start, batch)
        lease = self._leases.get(key)
        if lease is None or lease.limit != limit:
            lease = self._leases[key] = Lease(limit=limit, start=start, batch=batch, last_admit=self._mono())
        if batch:
            lease.fraction = batch_fraction(limit, start, now, share, paced)
        return lease

    def _demand_of(self, lease: Lease) -> Demand:
        return self._demand.setdefault((lease.limit.id, lease.batch), Demand(since=self._mono()))

    def _take(self, leases: list[Lease], now: float) -> Reservation:
        taken = []
        mono = self._mono()
        for lease in leases:
            demand = self._demand_of(lease)
            reserved = math.ceil(demand.tokens_per_request) if lease.limit.tokens is not None else 0
            lease.requests -= 1 if lease.limit.requests is not None else 0
            lease.tokens -= reserved
            demand.admitted += 1
            lease.last_admit = mono
            if not lease.pending and low_water(lease, demand):
                self._schedule(lease)
            taken.append((lease, reserved))
        self.admitted += 1
        count_admitted("batch" if leases and leases[0].batch else "live")
        return Reservation(tuple(taken), _headers(leases, now))

    # the keeper ---------------------------------------------------------------------------------------------

    def _schedule(self, lease: Lease) -> None:
        if lease.pending or self._closed:
            return
        lease.pending = True
        self._due[lease.key] = lease
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="relay-rate-limit-leases", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _run(self) -> None:
        last_sweep = self._mono()
        while True:
            with self._cond:
                while True:
                    if self._mono() - last_sweep >= SWEEP_S:
                        self._sweep()
                        last_sweep = self._mono()
                    if self._due or self._closed:
                        break
                    self._cond.wait(SWEEP_S)
                if self._closed and not self._due:
                    return
                asks = self._asks()
            results: list[tuple[int, int, int, int, int, int]] = []
            error: BaseException | None = None
            if asks:
                try:
                    with autocommit(self._pool) as conn:
                        results = take(conn, asks)
                except Exception as exc:  # the database is away: waiters give up, the next admission retries
                    log.warning("rate-limit lease statement failed: %s: %s", type(exc).__name__, exc)
                    error = exc
                self.statements += 1
                count_lease_statement("batch" if asks[0][0].batch else "live")
            with self._cond:
                self._apply(asks, results, error)
                self._cond.notify_all()

    def _asks(self) -> list[Ask]:
        """What the next statement asks for each due lease (hand-backs and repayments taken off the lease now)."""
        asks: list[Ask] = []
        due, self._due = self._due, {}
        for key in sorted(due, key=lambda k: (str(k[0]), k[1], k[2])):
            lease = due[key]
            lease.error = None
            want_r, want_t = wanted(lease, self._demand_of(lease), self._mono())
            ret_r = ret_t = 0
            if key in self._returning:
                self._returning.discard(key)
                want_r = want_t = 0
                ret_r, lease.requests = max(0, lease.requests), min(0, lease.requests)
                ret_t = max(0, lease.tokens)
                lease.tokens -= ret_t
            repay = max(0, -lease.tokens) if lease.limit.tokens is not None else 0
            lease.tokens += repay
            if not (want_r or want_t or ret_r or ret_t or repay):
                lease.pending = False
                continue
            lease.sent = {"need": lease.waiters, "want_t": want_t, "ret_r": ret_r, "ret_t": ret_t, "repay": repay}
            asks.append((lease, want_r, want_t, ret_r, ret_t, repay))
        return asks

    def _apply(self, asks: list[Ask], results: list[tuple[int, int, int, int, int, int]],
               error: BaseException | None) -> None:
        mono = self._mono()
        for n, ask in enumerate(asks):
            lease = ask[0]
            lease.pending = False
            sent = lease.sent
            if error is not None:
                lease.requests += sent["ret_r"]
                lease.tokens += sent["ret_t"] - sent["repay"]
                lease.error = error
                continue
            granted_r, granted_t, *window = results[n]
            lease.requests += granted_r
            lease.tokens += granted_t
            lease.window_requests, lease.window_tokens, lease.window_batch_requests, lease.window_batch_tokens = window
            lease.last_slice = granted_r
            # Refused only when the window itself had no room: it granted less than was asked. A token balance still
            # spent after a whole grant (the answers of calls admitted earlier landed while the statement ran, each
            # using more tokens than the estimate it reserved) asks again instead.
            short_r = lease.limit.requests is not None and granted_r < sent["need"]
            short_t = (lease.limit.tokens is not None and sent["need"] > 0 and granted_t < sent["want_t"]
                       and lease.tokens <= 0)
            if short_r or short_t:
                lease.refused_at = mono
            elif lease.waiters and not lease.can_admit():
                self._schedule(lease)

    def _sweep(self) -> None:
        """Forget leases of ended windows (what they held expires with the window); hand back idle ones."""
        now, mono = self._clock(), self._mono()
        for key, lease in list(self._leases.items()):
            if lease.end < now:
                if not lease.pending:
                    del self._leases[key]
            elif (mono - lease.last_admit > IDLE_RETURN_S and not lease.pending and not lease.waiters
                  and (lease.requests > 0 or lease.tokens > 0 or lease.tokens < 0)):
                self._returning.add(key)
                self._schedule(lease)


def refusal(lease: Lease, now: float, share: float, paced: bool) -> RateLimited:
    """The 429 for a window with no room left for this consumer; `retry_at` says when budget may come back (a
    paced batch's share is released over the window, so sooner than the window's end)."""
    limit = lease.limit
    retry_after = max(1, math.ceil(lease.end - now))
    what = f"{limit.requests} requests" if limit.requests is not None else ""
    if limit.tokens is not None:
        what = f"{what} / {limit.tokens} tokens".strip(" /")
    who = f"batch items (their share is {share:g} of each limit)" if lease.batch and share < 1 else "this policy"
    headers = {"Retry-After": str(retry_after), "x-ratelimit-reset-requests": f"{retry_after}s",
               "x-ratelimit-remaining-requests": "0"}
    if limit.requests is not None:
        headers["x-ratelimit-limit-requests"] = str(limit.requests)
    exc = RateLimited(message=f"rate limit exceeded for {who}: {what} per {limit.window_s}s;"
                      f" retry after {retry_after}s", headers=headers)
    exc.retry_at = lease.end  # type: ignore[attr-defined]
    if paced and lease.batch and lease.fraction < share:
        exc.retry_at = min(lease.end, now + 0.5)  # type: ignore[attr-defined]
    return exc


def _headers(leases: list[Lease], now: float) -> tuple[tuple[str, str], ...]:
    """x-ratelimit-* for the tightest request and token windows, as this process sees them."""
    out: list[tuple[str, str]] = []
    req = [lease for lease in leases if lease.limit.requests is not None]
    if req:
        left = {id(lease): max(0, (lease.limit.requests or 0) - lease.window_requests + lease.requests)
                for lease in req}
        tight = min(req, key=lambda lease: left[id(lease)])
        out += [("x-ratelimit-limit-requests", str(tight.limit.requests)),
                ("x-ratelimit-remaining-requests", str(left[id(tight)])),
                ("x-ratelimit-reset-requests", f"{max(0, math.ceil(tight.end - now))}s")]
    tok = [lease for lease in leases if lease.limit.tokens is not None]
    if tok:
        left = {id(lease): max(0, (lease.limit.tokens or 0) - lease.window_tokens + lease.tokens) for lease in tok}
        tight = min(tok, key=lambda lease: left[id(lease)])
        out += [("x-ratelimit-limit-tokens", str(tight.limit.tokens)),
                ("x-ratelimit-remaining-tokens", str(left[id(tight)]))]
    return tuple(out)
