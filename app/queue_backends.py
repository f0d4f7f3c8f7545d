"""Which queue backend a process probes: RabbitMQ (RELAY_BROKER_URL, RELAY_QUEUE_NAME), built once per process
(`Runtime.service`). The publishing side is built by the worker process that runs the dispatcher
(actors/publisher.py)."""

from __future__ import annotations

from app.queue_port import QueueProbe
from app.rabbit_probe import RabbitProbe
from app.runtime import Runtime
from app.settings import Settings


def open_queue_probe(settings: Settings) -> QueueProbe:
    """The probe of SETTINGS' item queue on its RabbitMQ nodes (tried in order)."""
    return RabbitProbe(settings.broker_urls, settings.queue_name)


def queue_probe(runtime: Runtime) -> QueueProbe:
    """This process's probe of the item queue (one per runtime)."""
    return runtime.service("queue_probe", lambda: open_queue_probe(runtime.settings))
