"""The webhook deliveries' own Dramatiq worker inside each `relay worker` process: its own consumers of the webhook
queue (and its .DQ, where retries wait) and its own threads (RELAY_WEBHOOK_THREADS), so a delivery never holds a
batch item's thread or prefetch slot, and a receiver that hangs slows only its own deliveries. `relay worker`'s main
Dramatiq worker consumes the item queue only."""

from __future__ import annotations

import dramatiq

# How long a Dramatiq worker's threads and consumers wait for work before they look whether they were stopped
# (Dramatiq's default is 1 s). A stopping `relay worker` waits about that long for its threads, then for its
# consumers. 0.25 s: an idle process of 16 threads wakes about 70 times a second, a few ms of CPU.
WORKER_TIMEOUT_MS = 250


class DeliveryWorker(dramatiq.Worker):
    """A Dramatiq worker on the webhook queue alone, started and stopped by the main worker's boot middleware; the
    worker hooks it emits are for the main worker's middleware to skip (see is_delivery_worker)."""

    def __init__(self, broker: dramatiq.Broker, queue: str, threads: int) -> None:
        super().__init__(broker, queues={queue}, worker_threads=threads, worker_timeout=WORKER_TIMEOUT_MS)
        self.queue_prefetch = threads  # messages held beyond the threads wait on the broker, not in this process


def is_delivery_worker(worker: dramatiq.Worker) -> bool:
    """Whether a worker hook is about the deliveries' worker (the batch side's boot and shutdown skip it)."""
    return isinstance(worker, DeliveryWorker)
