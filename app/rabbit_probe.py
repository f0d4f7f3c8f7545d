"""RabbitMQ's probe of the item queue (`app/queue_port.QueueProbe`): whether a node answers, and the queue's depth,
each on a short connection of its own."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pika
import pika.exceptions

from app.queue_port import QueueDepth

log = logging.getLogger("relay.queues")
NOT_FOUND = 404  # AMQP reply code for a passive declare of a queue nobody declared
CHECK_TIMEOUT_S = 3.0  # a readiness check gives up on a node after this long
DEPTH_TIMEOUT_S = 1.0  # a depth read (a scrape, the fleet view) after this long


class RabbitProbe:
    """Reads QUEUE on the first of BROKER_URLS that answers, each read on a short connection of its own (any thread
    may probe; nothing is kept open)."""

    def __init__(self, broker_urls: Sequence[str], queue: str) -> None:
        self.broker_urls = list(broker_urls)
        self.queue = queue

    def check(self) -> str:
        """Open and close one AMQP connection; "ok" or why no node answered."""
        pika_log = logging.getLogger("pika")
        level = pika_log.level
        pika_log.setLevel(logging.CRITICAL)  # the reason is returned; pika's own multi-line error logs add nothing
        try:
            pika.BlockingConnection(self._parameters(CHECK_TIMEOUT_S)).close()
            return "ok"
        except Exception as exc:  # pika raises many unrelated classes for "cannot connect"
            return f"unreachable: {type(exc).__name__}"
        finally:
            pika_log.setLevel(level)

    def depth(self) -> QueueDepth | None:
        """(messages, consumers) of the queue by a passive declare; None when RabbitMQ or the queue cannot be read."""
        try:
            conn = pika.BlockingConnection(self._parameters(DEPTH_TIMEOUT_S, stack_timeout=DEPTH_TIMEOUT_S * 2))
        except Exception as exc:  # pika raises many unrelated classes for "cannot connect"
            log.warning("cannot reach RabbitMQ (%s)", type(exc).__name__)
            return None
        try:
            ok = conn.channel().queue_declare(queue=self.queue, passive=True).method
            return QueueDepth(int(ok.message_count), int(ok.consumer_count))
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == NOT_FOUND:  # nobody declared the queue yet: nothing is waiting
                return QueueDepth(0, 0)
            log.info("queue %s not readable (%s)", self.queue, exc.reply_code)
            return None
        except Exception as exc:  # the broker went away mid-call
            log.info("queue %s not readable (%s)", self.queue, type(exc).__name__)
            return None
        finally:
            try:
                conn.close()
            except Exception:  # already closed by the broker
                log.debug("RabbitMQ connection already closed")

    def _parameters(self, timeout: float, *, stack_timeout: float | None = None) -> list[pika.URLParameters]:
        params = [pika.URLParameters(url) for url in self.broker_urls]
        for each in params:
            each.socket_timeout = timeout
            each.blocked_connection_timeout = timeout
            each.connection_attempts = 1
            if stack_timeout is not None:
                each.stack_timeout = stack_timeout
        return params
