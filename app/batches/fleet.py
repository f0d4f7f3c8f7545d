"""The operator's view of the machinery behind batches: worker processes (from their heartbeats) and the item
queue's depth in RabbitMQ. No Flask."""

from __future__ import annotations

from typing import Any

from app.batches import operator_store
from app.queue_backends import queue_probe
from app.runtime import Runtime


def fleet_status(runtime: Runtime) -> dict[str, Any]:
    """Every worker with a heartbeat row (alive when heard from within RELAY_WORKER_LOST_AFTER_S), the number
    alive, the item queue (messages ready and consumers by a passive declare; null when RabbitMQ cannot be
    reached), and the items waiting: queued in Postgres, most of them not yet published (a message holds up to 8
    items, and only the dispatch window is in RabbitMQ at a time)."""
    settings = runtime.settings
    with runtime.pool.connection() as conn:
        workers = operator_store.list_workers(conn, settings.worker_lost_after_s)
        waiting = operator_store.waiting_items(conn)
    counts = queue_probe(runtime).depth()
    return {
        "workers": [{**row, "running": int(row["running"])} for row in workers],
        "alive": sum(1 for row in workers if row["alive"]),
        "lost_after_s": settings.worker_lost_after_s,
        "queue": {"name": settings.queue_name, "reachable": counts is not None,
                  "messages": counts[0] if counts else None, "consumers": counts[1] if counts else None},
        "items": {"queued": int(waiting["queued"]), "unpublished": int(waiting["unpublished"]),
                  "running": sum(int(row["running"]) for row in workers)},
        "broker_ui_url": settings.broker_ui_url or None,
    }
