"""State metrics read at scrape time: batch items by state, breakers per host key, queue depth, webhook deliveries
waiting.

These are the same for every replica (they come from Postgres and RabbitMQ), so aggregate them with max(),
not sum(). A scrape never fails because a dependency is down: the `*_up` gauges say 0 and the rest is absent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from app.queue_backends import queue_probe
from app.runtime import Runtime
from schemas.batches import ITEM_STATES

log = logging.getLogger("relay.metrics")
BREAKER_STATES = ("closed", "open", "half_open")
DB_TIMEOUT_S = 2.0

# From the progress counters, never a scan of the items: queued = every batch's total less what is counted.
_ITEMS_BY_STATE = """SELECT coalesce(sum(running), 0) AS running, coalesce(sum(completed), 0) AS completed,
  coalesce(sum(discarded), 0) AS discarded, coalesce(sum(cancelled), 0) AS cancelled,
  (SELECT coalesce(sum(total), 0) FROM batches) - coalesce(sum(running + completed + discarded + cancelled), 0)
  AS queued FROM batch_progress"""
# The backlog per policy: items of unfinished batches not final yet, and how many owners they belong to.
# Items of a paced policy not started yet wait for its limits' budget.
_BACKLOG = """SELECT p.name AS policy, bool_or(p.batch_pace) AS paced, sum(b.total - coalesce(g.final, 0)) AS items,
  sum(b.total - coalesce(g.final, 0) - coalesce(g.running, 0)) AS unstarted, count(DISTINCT b.owner) AS owners
  FROM batches b JOIN policies p ON p.id = b.policy_id
  LEFT JOIN LATERAL (SELECT sum(completed + discarded + cancelled) AS final, sum(running) AS running
                     FROM batch_progress WHERE batch_id = b.id) g ON true
  WHERE b.finished_at IS NULL GROUP BY p.name ORDER BY p.name"""
# How many webhook deliveries are pending, and the age in seconds of the oldest one's event (0 when none).
_WEBHOOKS_PENDING = """SELECT count(*) AS pending,
  coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_s
  FROM webhook_deliveries WHERE state = 'pending'"""
_BREAKERS = """SELECT h.name AS host, k.name AS host_key, coalesce(kh.consecutive_failures, 0) AS failures,
  kh.opened_until FROM host_keys k JOIN hosts h ON h.id = k.host_id
  LEFT JOIN key_health kh ON kh.host_key_id = k.id ORDER BY h.name, k.name"""


class StateCollector:
    """A prometheus_client collector reading RUNTIME's Postgres and RabbitMQ on each scrape."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def collect(self) -> Iterator[Metric]:
        yield from self._database()
        yield from self._broker()

    def _database(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("relay_metrics_database_up", "1 when this scrape could read Postgres")
        try:
            with self._runtime.pool.connection(timeout=DB_TIMEOUT_S) as conn, conn.transaction():
                conn.execute(f"SET LOCAL statement_timeout = {int(DB_TIMEOUT_S * 1000)}")
                items = {state: int(n) for state, n in _rows(conn, _ITEMS_BY_STATE)[0].items()}
                backlog = _rows(conn, _BACKLOG)
                breakers = _rows(conn, _BREAKERS)
                webhooks = _rows(conn, _WEBHOOKS_PENDING)[0]
        except Exception as exc:  # any failure: report the database as down, never fail the scrape
            log.warning("metrics: cannot read Postgres (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield _items_gauge(items)
        yield from _backlog_gauges(backlog)
        yield from _breaker_gauges(breakers)
        yield from _webhook_gauges(webhooks)

    def _broker(self) -> Iterator[Metric]:
        settings = self._runtime.settings
        up = GaugeMetricFamily("relay_metrics_broker_up", "1 when this scrape could read the queue from RabbitMQ")
        depth = GaugeMetricFamily("relay_queue_messages", "Messages ready or unacknowledged in the item queue",
                                  labels=["queue"])
        consumers = GaugeMetricFamily("relay_queue_consumers", "Consumers (worker processes) on the item queue",
                                      labels=["queue"])
        counts = queue_probe(self._runtime).depth()
        up.add_metric([], 0 if counts is None else 1)
        yield up
        if counts is not None:
            depth.add_metric([settings.queue_name], counts[0])
            consumers.add_metric([settings.queue_name], counts[1])
            yield depth
            yield consumers


def _rows(conn: Any, query: str) -> list[dict[str, Any]]:
    """QUERY's rows as dicts (the pool's connections use dict rows)."""
    return list(conn.execute(query).fetchall())


def _backlog_gauges(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """What each policy's unfinished batches still have to run, and for how many owners (the fair-share view)."""
    items = GaugeMetricFamily("relay_batch_backlog_items", "Items of unfinished batches not final yet, per policy",
                              labels=["policy"])
    owners = GaugeMetricFamily("relay_batch_backlog_owners", "Owners with unfinished batches, per policy",
                               labels=["policy"])
    waiting = GaugeMetricFamily("relay_batch_paced_waiting_items",
                                "Items of paced policies' batches not started yet: waiting for the limits' budget",
                                labels=["policy"])
    for row in rows:
        items.add_metric([row["policy"]], int(row["items"]))
        owners.add_metric([row["policy"]], int(row["owners"]))
        if row["paced"]:
            waiting.add_metric([row["policy"]], max(0, int(row["unstarted"])))
    yield items
    yield owners
    yield waiting


def _items_gauge(items: dict[str, int]) -> Metric:
    gauge = GaugeMetricFamily("relay_batch_items", "Batch items by state (running = items running now)",
                              labels=["state"])
    for state in ITEM_STATES:
        gauge.add_metric([state], items.get(state, 0))
    return gauge


def _webhook_gauges(stats: dict[str, Any]) -> Iterator[Metric]:
    pending = GaugeMetricFamily("relay_webhook_deliveries_pending", "Webhook deliveries not delivered (nor given up)"
                                " yet")
    oldest = GaugeMetricFamily("relay_webhook_oldest_undelivered_seconds",
                               "Age of the oldest webhook delivery still pending (0 when none)")
    pending.add_metric([], int(stats["pending"]))
    oldest.add_metric([], float(stats["oldest_s"]))
    yield pending
    yield oldest


def _breaker_gauges(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    state = GaugeMetricFamily("relay_host_key_breaker_state",
                              "Circuit breaker per host key: 1 for its current state, 0 for the others",
                              labels=["host", "host_key", "state"])
    failures = GaugeMetricFamily("relay_host_key_consecutive_failures", "Consecutive failures per host key",
                                 labels=["host", "host_key"])
    now = datetime.now(UTC)
    for r in rows:
        current = _breaker_state(r["opened_until"], now)
        for name in BREAKER_STATES:
            state.add_metric([r["host"], r["host_key"], name], 1 if name == current else 0)
        failures.add_metric([r["host"], r["host_key"]], r["failures"])
    yield state
    yield failures


def _breaker_state(opened_until: datetime | None, now: datetime) -> str:
    if opened_until is None:
        return "closed"
    return "open" if opened_until > now else "half_open"

