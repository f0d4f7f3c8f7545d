"""One delivery attempt, as the webhook actor makes it: claim it for the message's token (with a lease), check the
destination, sign, POST, record the attempt, and say what comes next.

Retry schedule: after the n-th failed attempt the next waits RELAY_WEBHOOK_RETRY_MIN_S x 2^(n-1), at most
RELAY_WEBHOOK_RETRY_MAX_S, and never past RELAY_WEBHOOK_GIVE_UP_AFTER_S after the event (the last attempt is made
at that deadline); then the delivery is `failed`. A wait of up to BROKER_HOLD_MAX_S rides on a Dramatiq retry of the
same message; a longer one is kept in Postgres and the outbox publishes a new message when it is due (RabbitMQ
closes a consumer that holds a message unacknowledged for 30 minutes, and a delayed retry is held so).
"""

from __future__ import annotations

import http.client
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from app.catalog.secrets import SecretBox, SecretUnreadable
from app.observability.metrics import count_webhook_delivery, observe_webhook_attempt
from app.runtime import Runtime
from app.settings import Settings
from app.webhooks import signing, store
from app.webhooks.destinations import DestinationRefused, HostRules, resolve_target
from app.webhooks.events import event_name
from app.webhooks.sender import post
from app.webhooks.slots import DestinationSlots, busy_wait

log = logging.getLogger("relay.webhooks")
LEASE_MARGIN_S = 5.0  # an attempt's lease outlasts its timeout by this (its outcome is written meanwhile)
BROKER_HOLD_MAX_S = 600.0


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: the receiver's status if it answered, its latency, why it did not deliver (None when it
    did), and whether trying again can help (a refused destination or an unreadable secret cannot)."""

    status: int | None
    latency_ms: float
    error: str | None
    retryable: bool = True


def deliver(runtime: Runtime, delivery_id: UUID, token: UUID, slots: DestinationSlots | None = None) -> float | None:
    """Make the attempt TOKEN's message may make, within a slot of its destination (SLOTS: this process's); the
    seconds after which the same message should come again (a broker retry), or None when it has nothing more to
    do. A destination with no free slot: the delivery is not claimed and comes back shortly."""
    if slots is None:
        return _deliver(runtime, delivery_id, token)
    with runtime.pool.connection() as conn:
        url = store.target_url(conn, delivery_id)
    if url is None:
        return None
    with slots.hold(url) as free:
        return _deliver(runtime, delivery_id, token) if free else busy_wait()


def _deliver(runtime: Runtime, delivery_id: UUID, token: UUID) -> float | None:
    settings = runtime.settings
    with runtime.pool.connection() as conn, conn.transaction():
        claimed = store.claim(conn, delivery_id, token, settings.webhook_timeout_s + LEASE_MARGIN_S)
        if claimed is None:  # another attempt holds the lease: come back when it ends; else stale or done
            return store.lease_left(conn, delivery_id, token)
    url = claimed["endpoint_url"] or claimed["url"]
    started = time.monotonic()
    outcome = attempt(runtime, claimed, url)
    observe_webhook_attempt("delivered" if outcome.error is None else "failed", time.monotonic() - started)
    now = claimed["started_at"] + timedelta(seconds=time.monotonic() - started)  # the database's clock
    with runtime.pool.connection() as conn, conn.transaction():
        store.record_attempt(conn, delivery_id, claimed["attempts"], status=outcome.status,
                             latency_ms=outcome.latency_ms, error=outcome.error)
        return _conclude(conn, settings, claimed, token, url, outcome, now)


def attempt(runtime: Runtime, claimed: dict[str, Any], url: str) -> Outcome:
    """Check the destination, sign the event's body with the destination's secrets and POST it; never raises for
    anything the receiver or the network does."""
    settings = runtime.settings
    started = time.monotonic()

    def took() -> float:
        return round((time.monotonic() - started) * 1000, 3)

    try:
        keys = _keys(runtime, claimed)
        target = resolve_target(url, HostRules.parse(settings.webhook_allowed_networks, networks_only=True))
        body = claimed["body"].encode()
        headers = signing.headers(keys, event_name(claimed["event_id"]), int(time.time()), body)
        status, location = post(target, body, headers, settings.webhook_timeout_s, settings.webhook_connect_timeout_s)
    except (DestinationRefused, SecretUnreadable, UnicodeError) as exc:
        return Outcome(None, took(), f"refused: {exc}", retryable=False)
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(None, took(), _network_error(exc))
    if 200 <= status < 300:
        return Outcome(status, took(), None)
    if 300 <= status < 400:
        return Outcome(status, took(), f"HTTP {status}: redirects are not followed (to {str(location)[:200]})")
    return Outcome(status, took(), f"HTTP {status}")


def retry_wait(settings: Settings, attempts: int) -> float:
    """Seconds before the next attempt, after ATTEMPTS failed ones."""
    return float(min(settings.webhook_retry_min_s * 2 ** min(attempts - 1, 40), settings.webhook_retry_max_s))


def _keys(runtime: Runtime, claimed: dict[str, Any]) -> list[bytes]:
    """The HMAC keys that sign this delivery: its endpoint's secret (and the previous one, during a rotation), read
    now so a rotation applies to retries too, or a callback's own secret."""
    box = runtime.service("webhook_secret_box", lambda: SecretBox(runtime.settings.secret_key))
    if claimed["endpoint_id"] is not None:
        tokens = [claimed["endpoint_secret"], claimed["endpoint_previous_secret"]]
    elif claimed["secret_enc"] is not None:
        tokens = [claimed["secret_enc"]]
    else:
        raise DestinationRefused("the catalog no longer has this webhook (it, or its project or team, was removed)")
    return [signing.secret_bytes(box.decrypt(t)) for t in tokens if t is not None]


def _conclude(conn: Any, settings: Settings, claimed: dict[str, Any], token: UUID, url: str, outcome: Outcome,
              now: datetime) -> float | None:
    """Record what the attempt means for the delivery; the broker retry's wait, if the same message retries."""
    delivery_id = claimed["id"]
    common: dict[str, Any] = {"url": url, "status": outcome.status, "error": outcome.error}
    if outcome.error is None:
        if store.conclude(conn, delivery_id, token, state="delivered", **common):
            count_webhook_delivery("delivered")
        return None
    deadline = claimed["since"] + timedelta(seconds=settings.webhook_give_up_after_s)
    if not outcome.retryable or now >= deadline:
        if store.conclude(conn, delivery_id, token, state="failed", **common):
            count_webhook_delivery("given_up")
            log.warning("webhook delivery %s (%s) failed after %d attempt(s): %s", delivery_id,
                        claimed["destination"], claimed["attempts"], outcome.error)
        return None
    retry_at = min(now + timedelta(seconds=retry_wait(settings, claimed["attempts"])), deadline)
    wait = (retry_at - now).total_seconds()
    in_broker = wait <= BROKER_HOLD_MAX_S
    moved = store.conclude(conn, delivery_id, token, state="pending", retry_at=retry_at, keep_token=in_broker,
                           **common)
    return wait if moved and in_broker else None


def _network_error(exc: BaseException) -> str:
    """A network failure in a few words (the exception's kind and first line; never a header or a body)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
