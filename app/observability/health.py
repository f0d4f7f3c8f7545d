"""Readiness checks against the real dependencies."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from app.db import autocommit
from app.queue_backends import queue_probe
from app.runtime import Runtime


def check_readiness(runtime: Runtime) -> dict[str, str]:
    """Return {"postgres": "ok"|reason, "rabbitmq": "ok"|reason}."""
    return {"postgres": _check_postgres(runtime), "rabbitmq": queue_probe(runtime).check()}


WRITE_WAIT_S = 2.0  # a probe commit waiting longer than this for synchronous replication: writes are stuck


def _check_postgres(runtime: Runtime) -> str:
    try:
        with autocommit(runtime.pool, timeout=3) as conn:
            return check_writes(conn)
    except Exception as exc:  # any failure means "not ready"; the reason is reported, not raised
        return f"unreachable: {type(exc).__name__}"


def check_writes(conn: psycopg.Connection[Any]) -> str:
    """"ok" when a write commits on CONN's server now, else why not: the server is a standby (read-only), or the
    probe's commit (one row of readiness_probe) waited WRITE_WAIT_S for a synchronous standby that does not
    answer. A cancel request ends that wait (the statement timeout does not reach a commit's wait): the commit
    stays local, and the server says so in a WARNING (the only warning such a commit can raise); a probe queued
    behind a stuck one is cancelled on the row lock."""
    row = conn.execute("SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' AS ro"
                       ).fetchone()
    if row and row["ro"]:
        return "read-only: the server is a standby (no primary reached)"
    warnings: list[str] = []

    def note(diag: psycopg.errors.Diagnostic) -> None:
        if diag.severity_nonlocalized == "WARNING":
            warnings.append(diag.sqlstate or "")

    conn.add_notice_handler(note)
    started = time.monotonic()
    cancel = threading.Timer(WRITE_WAIT_S, conn.cancel_safe)
    cancel.start()
    try:
        with conn.transaction():
            conn.execute("UPDATE readiness_probe SET probed_at = now() WHERE id = 1")
    except psycopg.errors.QueryCanceled:
        warnings.append("57014")
    finally:
        cancel.cancel()
        conn.remove_notice_handler(note)
    waited = time.monotonic() - started
    if warnings or waited >= WRITE_WAIT_S:
        return f"writes stuck: a commit waited {waited:.1f} s for a synchronous standby"
    return "ok"

