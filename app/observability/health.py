"""Readiness checks against the real dependencies."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pika

from app.runtime import Runtime


def check_readiness(runtime: Runtime) -> dict[str, str]:
    """Return {"postgres": "ok"|reason, "rabbitmq": "ok"|reason}."""
    return {"postgres": _check_postgres(runtime), "rabbitmq": check_rabbitmq(runtime.settings.broker_urls)}


def _check_postgres(runtime: Runtime) -> str:
    try:
        with runtime.pool.connection(timeout=3) as conn:
            conn.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # any failure means "not ready"; the reason is reported, not raised
        return f"unreachable: {type(exc).__name__}"


def check_rabbitmq(broker_urls: Sequence[str]) -> str:
    """Open and close one AMQP connection to the first of BROKER_URLS that answers; "ok" or why none did."""
    params = [pika.URLParameters(url) for url in broker_urls]
    for each in params:
        each.socket_timeout = 3
        each.connection_attempts = 1
        each.blocked_connection_timeout = 3
    pika_log = logging.getLogger("pika")
    level = pika_log.level
    pika_log.setLevel(logging.CRITICAL)  # the reason is returned; pika's own multi-line error logs add nothing
    try:
        pika.BlockingConnection(params).close()
        return "ok"
    except Exception as exc:  # pika raises many unrelated classes for "cannot connect"
        return f"unreachable: {type(exc).__name__}"
    finally:
        pika_log.setLevel(level)
