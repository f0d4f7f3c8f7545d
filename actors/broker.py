"""The Dramatiq broker, built once per process from Settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dramatiq
import pika.exceptions
from dramatiq.brokers.rabbitmq import DEAD_MESSAGE_TTL, RabbitmqBroker
from dramatiq.common import dq_name, xq_name

from app.queues import PRECONDITION_FAILED, queue_arguments, queue_mismatch
from app.settings import Settings

_broker: RabbitmqBroker | None = None


class RelayBroker(RabbitmqBroker):
    """Dramatiq's RabbitMQ broker, declaring each queue with its .DQ and .XQ as classic or quorum queues."""

    def __init__(self, *, queue_type: str = "classic", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queue_type = queue_type

    def _build_queue_arguments(self, queue_name: str) -> dict[str, Any]:
        return queue_arguments(self.queue_type, super()._build_queue_arguments(queue_name))

    def _declare_queue(self, queue_name: str) -> Any:
        with self._refused_as_mismatch(queue_name):
            return super()._declare_queue(queue_name)

    def _declare_dq_queue(self, queue_name: str) -> Any:
        with self._refused_as_mismatch(dq_name(queue_name)):
            return super()._declare_dq_queue(queue_name)

    def _declare_xq_queue(self, queue_name: str) -> Any:
        with self._refused_as_mismatch(xq_name(queue_name)):
            if self.queue_type == "classic":
                return super()._declare_xq_queue(queue_name)
            arguments = queue_arguments(self.queue_type, {"x-message-ttl": DEAD_MESSAGE_TTL})
            return self.channel.queue_declare(queue=xq_name(queue_name), durable=True, arguments=arguments)

    @contextmanager
    def _refused_as_mismatch(self, queue: str) -> Iterator[None]:
        """An inequivalent redeclare is not a connection problem to retry: raise QueueTypeMismatch instead."""
        try:
            yield
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != PRECONDITION_FAILED:
                raise
            del self.channel  # RabbitMQ closed it; the next declare opens a fresh one
            raise queue_mismatch(queue, self.queue_type, exc.reply_text) from exc


def build_broker(settings: Settings) -> RabbitmqBroker:
    """Create (once) and install the RabbitMQ broker: durable queues, persistent messages, publisher confirms."""
    global _broker
    if _broker is None:
        urls = [_with_connection_options(url) for url in settings.broker_urls]  # tried in order (cluster nodes)
        _broker = RelayBroker(url=urls if len(urls) > 1 else urls[0], confirm_delivery=True,
                              queue_type=settings.queue_type)
        dramatiq.set_broker(_broker)
    return _broker


def _with_connection_options(url: str) -> str:
    """URL with Relay's heartbeat, blocked-connection timeout and retries, unless it sets a heartbeat itself."""
    if "heartbeat=" in url:
        return url
    sep = "&" if "?" in url else "?"
    return url + f"{sep}heartbeat=10&blocked_connection_timeout=30&connection_attempts=3&retry_delay=1"


def get_broker() -> RabbitmqBroker:
    """The broker built by build_broker(); building it from the environment if needed."""
    return _broker or build_broker(Settings.from_env())
