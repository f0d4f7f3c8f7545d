"""The host-key pool: which keys a call may use, in what order, and per-key circuit breakers.

Breaker state lives in Postgres (key_health) so every replica skips a key that failed anywhere; each process reads
it through its KeyHealthCache (app/pipeline/keyhealth.py, invalidated by NOTIFY). After the cool-down one caller
claims the probe in Postgres (re-arming the open period for everyone else); a success closes the breaker, a failure
leaves it open.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from psycopg import Connection

from app.catalog.model import HostKey, Policy
from app.db import Statement

_rr_lock = threading.Lock()
_rr_counters: dict[tuple[UUID, UUID], Iterator[int]] = {}

_HEALTH = (
    "SELECT host_key_id, consecutive_failures, opened_until, last_used_at FROM key_health WHERE host_key_id = ANY(%s)"
)
_CLAIM_PROBE = """
UPDATE key_health SET opened_until = now() + make_interval(secs => %s)
WHERE host_key_id = %s AND opened_until <= now() RETURNING host_key_id
"""
_SUCCESS = """
INSERT INTO key_health AS h (host_key_id, consecutive_failures, opened_until, last_used_at, uses)
VALUES (%s, 0, NULL, %s, 1)
ON CONFLICT (host_key_id) DO UPDATE SET consecutive_failures = 0, opened_until = NULL,
    last_used_at = greatest(h.last_used_at, excluded.last_used_at), uses = h.uses + 1
"""
_FAILURE = """
INSERT INTO key_health AS h (host_key_id, consecutive_failures, opened_until, last_used_at, uses)
VALUES (%s, 1, CASE WHEN %s <= 1 THEN now() + make_interval(secs => %s) END, %s, 1)
ON CONFLICT (host_key_id) DO UPDATE SET consecutive_failures = h.consecutive_failures + 1,
    last_used_at = greatest(h.last_used_at, excluded.last_used_at), uses = h.uses + 1,
    opened_until = CASE WHEN h.consecutive_failures + 1 >= %s
                        THEN now() + make_interval(secs => %s) ELSE h.opened_until END
"""


@dataclass(frozen=True)
class KeyHealth:
    failures: int = 0
    opened_until: datetime | None = None
    last_used_at: datetime | None = None

    def is_open(self, now: datetime) -> bool:
        return self.opened_until is not None and self.opened_until > now


@dataclass(frozen=True)
class Candidate:
    key: HostKey
    health: KeyHealth

    @property
    def probe(self) -> bool:
        """The breaker is (or was) open: a call on this key needs the probe claim first."""
        return self.health.opened_until is not None


def pool_for_host(policy: Policy, host_id: UUID) -> list[HostKey]:
    """The policy's enabled keys for HOST_ID, in the policy's order."""
    return [k for k in policy.key_pool if k.host_id == host_id and k.enabled]


def order_candidates(health_of: Callable[[list[UUID]], dict[UUID, KeyHealth]], policy: Policy,
                     host_id: UUID) -> list[Candidate]:
    """The keys to try, ordered by the policy's strategy; keys whose breaker is open are left out. HEALTH_OF gives
    the state of keys by id (the process's KeyHealthCache)."""
    keys = pool_for_host(policy, host_id)
    if not keys:
        return []
    health = health_of([k.id for k in keys])
    now = datetime.now(UTC)
    ordered = _by_strategy(policy, host_id, keys, health)
    # A key whose cool-down has passed keeps its place: one caller claims the probe (claim_probe).
    states = [Candidate(k, health.get(k.id, KeyHealth())) for k in ordered]
    return [c for c in states if not c.health.is_open(now)]


def cooldown_left(health_of: Callable[[list[UUID]], dict[UUID, KeyHealth]], policy: Policy) -> float | None:
    """Seconds until the first of POLICY's enabled keys leaves its breaker's cool-down, when every one of them is in
    it; None when a key is usable now (or the pool is empty: nothing to wait for)."""
    keys = [k for k in policy.key_pool if k.enabled]
    if not keys:
        return None
    health, now = health_of([k.id for k in keys]), datetime.now(UTC)
    until = [health.get(k.id, KeyHealth()).opened_until for k in keys]
    if any(u is None or u <= now for u in until):
        return None
    return min((u - now).total_seconds() for u in until if u is not None)


def claim_probe(conn: Connection, policy: Policy, key: HostKey) -> bool:
    """Try to become the one caller that probes a half-open key."""
    row = conn.execute(_CLAIM_PROBE, (policy.breaker_cooldown_s, key.id)).fetchone()
    return row is not None


def record_success(conn: Connection, candidate: Candidate, *, track_use: bool) -> None:
    """Close the breaker if it had failures; update last use for least-recently-used selection."""
    statement = success_statement(candidate, track_use=track_use)
    if statement is not None:
        conn.execute(*statement)


def success_statement(candidate: Candidate, *, track_use: bool) -> Statement | None:
    """The write record_success makes, or None when nothing changes (no failures, no use tracking)."""
    if candidate.health.failures or candidate.health.opened_until is not None or track_use:
        return _SUCCESS, [candidate.key.id, datetime.now(UTC)]
    return None


def touch_statement(key: HostKey) -> Statement:
    """The write of a use that changes no breaker state (least-recently-used selection's last-use time).

    A use's time is when its statement is made (the call's end), never when a group commit writes it: a commit a
    few calls late would make an earlier use look the latest, and least-recently-used pick out of order."""
    return _SUCCESS, [key.id, datetime.now(UTC)]


def record_failure(conn: Connection, policy: Policy, key: HostKey) -> None:
    """Count a failure; open the breaker at the policy's threshold for its cool-down."""
    conn.execute(*failure_statement(policy, key))


def failure_statement(policy: Policy, key: HostKey) -> Statement:
    """The write record_failure makes."""
    threshold, cooldown = policy.breaker_failures, policy.breaker_cooldown_s
    return _FAILURE, [key.id, threshold, cooldown, datetime.now(UTC), threshold, cooldown]


def load_health(conn: Connection, ids: list[UUID]) -> dict[UUID, KeyHealth]:
    """The stored state of the keys IDS that have a row."""
    rows = conn.execute(_HEALTH, (ids,)).fetchall()
    return {r["host_key_id"]: KeyHealth(r["consecutive_failures"], r["opened_until"], r["last_used_at"])  # type: ignore[call-overload]
            for r in rows}


def _by_strategy(policy: Policy, host_id: UUID, keys: list[HostKey], health: dict[UUID, KeyHealth]) -> list[HostKey]:
    if policy.key_selection == "round_robin":
        with _rr_lock:
            counter = _rr_counters.setdefault((policy.id, host_id), itertools.count())
            start = next(counter) % len(keys)
        return keys[start:] + keys[:start]
    if policy.key_selection == "least_recently_used":
        epoch = datetime.fromtimestamp(0, tz=UTC)
        return sorted(keys, key=lambda k: health.get(k.id, KeyHealth()).last_used_at or epoch)
    return keys


