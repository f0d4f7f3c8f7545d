"""An item's final state built from what is known of it, and committed on its own: cancelled queued items,
items of lost workers, items past their limit, claims that went wrong. Items that ran commit theirs through the
worker's group writer (runner.py); both go through `app.batches.lifecycle.commit_finals`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg

from app.auth_model import Caller
from app.batches import outcomes, store
from app.batches.lifecycle import ItemFinal, ItemState, commit_finals
from app.batches.outcomes import Outcome
from app.runtime import Runtime
from app.usage.events import UsageEvent
from app.usage.shared import shared_rows
from app.usage.writer import UsageRecord

CANCEL_CHUNK = 5000  # queued items cancelled per statement


def final_of(row: dict[str, Any], idx: int, outcome: Outcome, *, from_state: str = ItemState.RUNNING,
             owner: str | None = None) -> ItemFinal:
    """The final state of an item known by its batch row (attribution) and idx, with a usage event of no tokens."""
    event = item_event(Caller.from_row(row), row["policy_id"], row["id"], idx, row["model"], outcome,
                       custom_id=row.get("custom_id"))
    return ItemFinal(row["id"], idx, outcome.state, outcome.error, outcome.error_code, UsageRecord(event),
                     from_state=from_state, worker_id=owner)


def finalize_now(runtime: Runtime, finals: Sequence[ItemFinal], *, counter: str = "") -> int:
    """Commit FINALS in a transaction of their own (cancel, reaper, settling); how many items moved."""
    with runtime.pool.connection() as conn, conn.transaction():
        return len(commit_finals(conn, finals, counter=counter))


def item_event(caller: Caller, policy_id: UUID, batch_id: UUID, idx: int, model: str | None, outcome: Outcome,
               started: float | None = None, custom_id: str | None = None) -> UsageEvent:
    """The usage event of an item that did not reach (or did not finish) the pipeline: no tokens."""
    return UsageEvent.for_caller(caller, request_id=f"{batch_id}:{idx}", source="batch", status=outcome.status,
                                 policy_id=policy_id, started=started, error_code=outcome.error_code,
                                 model_requested=model, route="/v1/batches", batch_id=batch_id, batch_idx=idx,
                                 custom_id=custom_id)


def finalize_by_key(runtime: Runtime, batch_id: UUID, idx: int, outcome: Outcome, *, owner: str | None,
                    counter: str = "") -> bool:
    """running (owned by OWNER) → OUTCOME, with its usage event; False if the item had moved on."""
    with runtime.pool.connection() as conn:
        row = store.item_status(conn, batch_id, idx, runtime.settings.worker_lost_after_s)
    if row is None:
        return False
    return finalize_now(runtime, [final_of(row, idx, outcome, owner=owner)], counter=counter) == 1


def share_usage_first(conn: psycopg.Connection[Any], batch: dict[str, Any]) -> None:
    """Write BATCH's shared usage row (as its first queued item's cancel event gives it), if it has a queued item,
    in the caller's transaction before it locks the batch's row or items: a group commit of the batch's items
    inserts that row too and then claims queued items, so a transaction that locked them first and wrote the row
    after would deadlock with it."""
    first = store.queued_items(conn, batch["id"], after=-1, limit=1)
    if first:
        idx, model, custom_id = first[0]
        final = final_of({**batch, "model": model, "custom_id": custom_id}, idx, outcomes.cancelled_queued(),
                         from_state=ItemState.QUEUED)
        shared_rows(conn, [final.record.event])


def expire_due(conn: psycopg.Connection[Any]) -> int:
    """Queued items of batches past their expires_at end as their API expires them (running ones finish)."""
    return sum(cancel_queued(conn, batch, outcomes.expired_for(batch["api"]))
               for batch in store.batches_due_to_expire(conn))


def cancel_queued(conn: psycopg.Connection[Any], batch: dict[str, Any], outcome: Outcome | None = None) -> int:
    """Every queued item of BATCH (a batch row) → cancelled (OUTCOME, by default a cancel's), with one usage event
    each, in the caller's transaction; how many."""
    outcome = outcome or outcomes.cancelled_queued()
    done, after = 0, -1
    while rows := store.queued_items(conn, batch["id"], after=after, limit=CANCEL_CHUNK):
        finals = [final_of({**batch, "model": model, "custom_id": custom_id}, idx, outcome, from_state=ItemState.QUEUED)
                  for idx, model, custom_id in rows]
        done += len(commit_finals(conn, finals))
        after = rows[-1][0]
    return done
