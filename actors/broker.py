"""The Dramatiq broker, built once per process from Settings."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from app.settings import Settings

_broker: RabbitmqBroker | None = None


def build_broker(settings: Settings) -> RabbitmqBroker:
    """Create (once) and install the RabbitMQ broker: durable queues, persistent messages, publisher confirms."""
    global _broker
    if _broker is None:
        url = settings.broker_url
        sep = "&" if "?" in url else "?"
        if "heartbeat=" not in url:
            url += f"{sep}heartbeat=10&blocked_connection_timeout=30&connection_attempts=3&retry_delay=1"
        _broker = RabbitmqBroker(url=url, confirm_delivery=True)
        dramatiq.set_broker(_broker)
    return _broker


def get_broker() -> RabbitmqBroker:
    """The broker built by build_broker(); building it from the environment if needed."""
    return _broker or build_broker(Settings.from_env())
