"""How Relay's item queue is declared on RabbitMQ: classic (the default) or quorum (replicated across a cluster).

Dramatiq declares three queues per name: the queue itself, its delay queue (`.DQ`) and its dead-letter queue
(`.XQ`). With `RELAY_QUEUE_TYPE=quorum` all three are quorum queues: dead-lettering into `.XQ` keeps working
(at-most-once, RabbitMQ's default for quorum queues), `.XQ` keeps its message TTL, and no `x-max-priority`
is set (quorum queues refuse it; Relay uses no priorities). Classic declarations are left exactly as Dramatiq
makes them, so queues that already exist stay equivalent.
"""

from __future__ import annotations

from typing import Any

from app.errors import RelayError

QUEUE_TYPES = ("classic", "quorum")
PRECONDITION_FAILED = 406  # AMQP reply code for a redeclare with different arguments


class QueueTypeMismatch(RelayError):
    """The item queue exists on RabbitMQ with other arguments (e.g. classic while quorum is asked for)."""

    status = 503
    code = "queue_type_mismatch"


def queue_arguments(queue_type: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Dramatiq's ARGUMENTS for one of the item queues, declared as QUEUE_TYPE."""
    if queue_type not in QUEUE_TYPES:
        raise ValueError(f"queue type must be one of {', '.join(QUEUE_TYPES)}, got {queue_type!r}")
    if queue_type == "classic":
        return dict(arguments)
    if "x-max-priority" in arguments:
        raise ValueError("quorum queues take no x-max-priority: build the broker without max_priority")
    return {**arguments, "x-queue-type": "quorum"}


def queue_mismatch(queue: str, queue_type: str, reason: str) -> QueueTypeMismatch:
    """The error for a declare RabbitMQ refused as inequivalent, saying how to get out of it."""
    return QueueTypeMismatch(message=(
        f"RabbitMQ refused to declare queue {queue} as a {queue_type} queue ({reason}). A queue's type cannot "
        f"change in place: drain it and delete {queue}, {queue}.DQ and {queue}.XQ, or set RELAY_QUEUE_NAME "
        f"to a new name (docs/cluster.md: RabbitMQ cluster and quorum queues)"))
