"""Retention for operators (`relay batches purge`): delete every batch finished before a date, with its items and
payload files, and remove payload folders no batch owns any more. Usage events are kept.

Users delete their own batches one at a time with `DELETE /v1/batches/{id}` (`service.delete_batch`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.batches import lifecycle, retention_store, store
from app.db import vacuum_for_reuse
from app.payload_backends import payload_store
from app.runtime import Runtime

PURGE_CHUNK = 20  # batches deleted per transaction (their items go with them)
# What deleting a batch deletes rows from (its progress, usage sums and files go by ON DELETE CASCADE)
VACUUMED = ("batches", "batch_items", "batch_progress", "batch_usage", "files")
STRAY_GRACE_S = 3600.0  # a folder without a batch row is left alone this long: its submit may still be committing


@dataclass
class PurgeReport:
    """What a purge removed (or, with dry_run, would remove)."""

    batches: int = 0
    items: int = 0
    stray_folders: int = 0
    left_behind: int = 0  # folders that could not be removed (the next purge tries again)


def purge_batches(runtime: Runtime, finished_before: datetime, *, dry_run: bool = False,
                  vacuum: bool = True) -> PurgeReport:
    """Delete the batches finished before FINISHED_BEFORE, vacuum their tables for the next batches to reuse the
    space (when VACUUM says so and something was deleted: app.db.vacuum_for_reuse), then remove the folders of
    batches that no longer exist."""
    report = PurgeReport()
    with runtime.pool.connection() as conn:
        lifecycle.finish_batches(conn)  # settled batches nobody read since get their finished_at first
        if dry_run:
            counts = retention_store.count_batches_finished_before(conn, finished_before)
            report.batches, report.items = int(counts["batches"]), int(counts["items"])
    if not dry_run:
        _delete_finished(runtime, finished_before, report)
        if vacuum and report.batches:
            vacuum_for_reuse(runtime.pool, VACUUMED)
    cutoff = min(finished_before.timestamp(), time.time() - STRAY_GRACE_S)
    for batch_id in _stray_batches(runtime, cutoff):
        report.stray_folders += 1
        if not dry_run and not payload_store(runtime).remove_batch(batch_id):
            report.left_behind += 1
    return report


def _delete_finished(runtime: Runtime, finished_before: datetime, report: PurgeReport) -> None:
    payloads = payload_store(runtime)
    while True:
        with runtime.pool.connection() as conn, conn.transaction():
            rows = retention_store.delete_batches_finished_before(conn, finished_before, limit=PURGE_CHUNK)
        if not rows:
            return
        for row in rows:  # after the commit: a crash here leaves stray folders, which the next purge removes
            report.batches += 1
            report.items += int(row["total"])
            if not payloads.remove_batch(row["id"]):
                report.left_behind += 1


def _stray_batches(runtime: Runtime, cutoff: float) -> list[UUID]:
    """Batch ids of stored payloads (whole or not) last written before CUTOFF that have no batch row."""
    old = {batch_id for batch_id, written in payload_store(runtime).batches() if written < cutoff}
    if not old:
        return []
    with runtime.pool.connection() as conn:
        known = store.existing_batches(conn, list(old))
    return sorted(old - known)
