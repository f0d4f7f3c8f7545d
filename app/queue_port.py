"""The queue probe port: what the API, the metrics and the operator's views read from the item queue, in verbs no
queue library shows through (the dispatcher's side of the queue is `app/batches/publisher.Publisher`).

`app/queue_backends.queue_probe` builds this process's probe once (`Runtime.service`); RabbitMQ's is
`app/rabbit_probe.RabbitProbe`.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class QueueDepth(NamedTuple):
    """What the item queue holds now: messages ready or unacknowledged, and its consumers (worker processes)."""

    messages: int
    consumers: int


class QueueProbe(Protocol):
    """Short, bounded reads of the item queue's broker; never raises (a broker away is an answer)."""

    def check(self) -> str:
        """"ok" when the broker answers now, else why not (readiness, and the commands' preflight)."""

    def depth(self) -> QueueDepth | None:
        """The item queue's depth (zero when nobody declared it yet); None when the broker cannot be read."""
