"""The webhook actor (one delivery attempt per message, on a queue of its own) and the worker boot hook that runs, in
every worker process, the webhook outbox and the deliveries' own Dramatiq worker (actors/delivery_worker.py: their
own consumers and threads, at most RELAY_WEBHOOK_PER_DESTINATION attempts at once to one destination). The delivery
logic is `app.webhooks.delivery`."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

import dramatiq
from dramatiq.middleware import Middleware

from actors.boot import worker_context
from actors.broker import get_broker
from actors.delivery_worker import DeliveryWorker, is_delivery_worker
from app.observability.tracing import NO_SPAN, SpanLike, get_tracing
from app.runtime import Runtime
from app.settings import Settings
from app.webhooks.delivery import deliver
from app.webhooks.outbox import Outbox
from app.webhooks.slots import DestinationSlots
from app.webhooks.store import batch_trace_context

log = logging.getLogger("relay.actors.webhooks")
_settings = Settings.from_env()
_broker = get_broker()  # actors bind to the global broker at import: build it first
_state: dict[str, Any] = {}
_slots = DestinationSlots(_settings.webhook_per_destination)  # this process's attempts in flight per destination
STOP_MARGIN_S = 5.0  # the deliveries' worker waits for attempts in flight this long past their timeout


def _always(_retries: int, _exc: BaseException) -> bool:
    """Retry every failure: when a delivery gives up is decided in Postgres (its give-up window), not by a count."""
    return True


@dramatiq.actor(queue_name=_settings.webhook_queue, retry_when=_always, min_backoff=1_000, max_backoff=300_000,
                time_limit=int((_settings.webhook_timeout_s + 60) * 1000))
def deliver_webhook(delivery_id: str, token: str) -> None:
    """One attempt of a delivery. Raises Retry when this message should come again (a short backoff, or another
    attempt's lease to wait out); other errors (Postgres away) are retried with Dramatiq's own backoff."""
    runtime = worker_context().runtime
    with _delivery_span(runtime, UUID(delivery_id)) as span:
        wait = deliver(runtime, UUID(delivery_id), UUID(token), _slots)
        span.set_attribute("relay.webhook.retry_in_s", wait if wait is not None else -1)
    if wait is not None:
        raise dramatiq.Retry(delay=max(1, int(wait * 1000)))


def _delivery_span(runtime: Runtime, delivery_id: UUID) -> AbstractContextManager[SpanLike]:
    """With tracing on: the attempt's trace, its own, linked to the submit of the batch whose end it tells."""
    tracing = get_tracing(runtime)
    if not tracing.enabled:
        return NO_SPAN
    with runtime.pool.connection() as conn:
        submitted = batch_trace_context(conn, delivery_id)
    return tracing.linked_root("relay.webhook.delivery", submitted, {"relay.webhook.delivery_id": str(delivery_id)})


def _publish(delivery_id: str, token: str) -> Any:
    return deliver_webhook.send(delivery_id, token)


class WebhookWorkerBoot(Middleware):
    """Per worker process: the outbox thread, publishing due deliveries (after BatchWorkerBoot built the context),
    and the deliveries' own worker."""

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if not is_delivery_worker(worker):
            _state["outbox"] = Outbox(worker_context().runtime, _publish).start()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if not is_delivery_worker(worker):
            deliveries = _state["deliveries"] = DeliveryWorker(broker, _settings.webhook_queue,
                                                               _settings.webhook_threads)
            deliveries.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if is_delivery_worker(worker):
            return
        outbox = _state.pop("outbox", None)
        if outbox is not None:
            outbox.close()
        deliveries = _state.pop("deliveries", None)
        if deliveries is not None:  # unstarted deliveries go back to the queue; attempts in flight end first
            deliveries.stop(timeout=int((_settings.webhook_timeout_s + STOP_MARGIN_S) * 1000))
