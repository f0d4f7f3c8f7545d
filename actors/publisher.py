"""The dispatcher's publisher on RabbitMQ: each message is a Dramatiq call of the item actor, published through a
pika connection of its own in AMQP transactions (`app/batches/publisher.Publisher`). Built once per worker process
by the boot middleware (actors/boot.py), used only by the dispatcher's thread (a pika connection is not
thread-safe)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

import dramatiq
import pika
from pika.adapters.blocking_connection import BlockingChannel

from app.batches.scheduler import Publication

log = logging.getLogger("relay.actors.publisher")

ITEM_ACTOR = "run_batch_items"  # the actor (in actors/batch_items.py) that takes (batch_id, [idx, ...])
TRACE_OPTION = "relay_trace"  # the message option carrying the submit's traceparent to the item actor
BROKER_HEARTBEAT_S = 10  # the publishing connection notices a silent node (a partition) within about this long
BROKER_BLOCKED_S = 10  # and gives up on a publish a broker alarm blocks


def encode_items(queue: str, batch_id: UUID, idxs: Sequence[int], trace: str | None = None) -> bytes:
    """The message body for some items of one batch, as Dramatiq encodes a call of the item actor (with the
    submit's trace context in its options, when it has one)."""
    return dramatiq.Message(queue_name=queue, actor_name=ITEM_ACTOR, args=(str(batch_id), list(idxs)), kwargs={},
                            options={TRACE_OPTION: trace} if trace else {}).encode()


def _parameters(url: str) -> pika.URLParameters:
    """Connection parameters of one node (the nodes are tried in order, RELAY_BROKER_URL first)."""
    params = pika.URLParameters(url)
    params.heartbeat = BROKER_HEARTBEAT_S
    params.blocked_connection_timeout = BROKER_BLOCKED_S
    params.socket_timeout = 5
    return params


class RabbitPublisher:
    """Publishes the item actor's messages on QUEUE, trying BROKER_URLS in order when it (re)connects."""

    def __init__(self, broker_urls: Sequence[str], queue: str) -> None:
        self.broker_urls = list(broker_urls)
        self.queue = queue
        self._conn: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None

    def publish(self, messages: Sequence[Publication]) -> None:
        """Publish persistent messages in one RabbitMQ transaction."""
        channel = self._open()
        channel.queue_declare(queue=self.queue, passive=True)  # never publish into a missing queue (dropped)
        for message in messages:
            properties = pika.BasicProperties(delivery_mode=2, headers={"relay-policy": message.policy,
                                                                        "relay-batch": str(message.batch_id)})
            channel.basic_publish("", self.queue, encode_items(self.queue, message.batch_id, message.idxs,
                                                               message.trace), properties)
        channel.tx_commit()

    def depth(self) -> int:
        """Messages ready in the queue, by a passive declare (which fails when the queue is missing)."""
        return int(self._open().queue_declare(queue=self.queue, passive=True).method.message_count)

    def idle(self) -> None:
        """Keep the AMQP heartbeat answered between passes."""
        if self._conn is not None:
            self._conn.process_data_events(time_limit=0)

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception:  # already broken; nothing to release
                log.debug("publisher: closing a broken connection", exc_info=True)

    def _open(self) -> BlockingChannel:
        if self._channel is None or not self._channel.is_open:
            self.close()
            self._conn = pika.BlockingConnection([_parameters(url) for url in self.broker_urls])
            self._channel = self._conn.channel()
            self._channel.tx_select()
        return self._channel
