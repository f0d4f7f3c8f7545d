"""The module `relay worker` hands to Dramatiq: builds the broker, adds the boot middleware, imports every actor."""

from __future__ import annotations

from dramatiq.middleware import CurrentMessage

from actors.boot import BatchWorkerBoot
from actors.broker import build_broker
from app.settings import Settings

settings = Settings.from_env()
broker = build_broker(settings)
broker.add_middleware(BatchWorkerBoot())
broker.add_middleware(CurrentMessage())  # the item actor reads the submit's trace context from its message's options
# Declared at boot, not first in a consumer's retry loop: a queue of another type (RELAY_QUEUE_TYPE) stops
# `relay worker` at once with app.queues.QueueTypeMismatch instead of leaving it consuming nothing.
broker.declare_queue(settings.queue_name, ensure=True)
broker.declare_queue(settings.webhook_queue, ensure=True)

from actors import batch_items  # noqa: E402,F401  (actors bind to the broker built above)
from actors.webhooks import WebhookWorkerBoot  # noqa: E402  (the webhook actor, on settings.webhook_queue)

broker.add_middleware(WebhookWorkerBoot())  # after BatchWorkerBoot: its outbox uses the context that one builds
