"""Messages whose item could not be claimed by the worker that took them (app/batches/runner.py): what becomes of
the item (cancelled, expired, over its spend cap, its claim's fate unknown, its owner lost), or of a hard-capped
batch's queued item that must end unrun."""

from __future__ import annotations

from uuid import UUID

from app.batches import budget, outcomes, store
from app.batches.finals import final_of, finalize_now
from app.batches.outcomes import Outcome
from app.runtime import Runtime


def settle(runtime: Runtime, worker_id: str, batch_id: UUID, idx: int, *, own_claim_unknown: bool = False,
           judge_owners: bool = True) -> str:
    """A message whose item could not be claimed: cancel it, discard it as worker lost or over its batch's spend cap
    (with every other queued item of the batch), or do nothing.

    OWN_CLAIM_UNKNOWN: an earlier attempt of this claim failed, so an item running under this worker's id may be
    that attempt having committed unseen. It is discarded, never run: whether it ran is not known for sure.

    JUDGE_OWNERS false (this worker's own heartbeat not steady yet, monitor.Heartbeat.steady): another worker's
    stale heartbeat proves nothing, since after a database outage or failover every heartbeat is stale until each
    worker beats again; the item is left to the reaper, which judges only once steady.
    """
    with runtime.pool.connection() as conn:
        row = store.item_status(conn, batch_id, idx, runtime.settings.worker_lost_after_s)
    if row is None:
        return "unknown"
    if row["state"] == "queued" and row["batch_status"] == "cancelled":
        outcome, source, owner = outcomes.cancelled_queued(), "queued", None
    elif row["state"] == "queued" and row["batch_expired"]:
        outcome, source, owner = outcomes.expired_for(row["api"]), "queued", None
    elif row["state"] == "queued" and row["over_budget"]:  # the spend cap: none of its queued items starts
        return "discarded" if budget.discard_unstarted(runtime, batch_id) else "duplicate"
    elif row["state"] == "running" and row["worker_id"] == worker_id and own_claim_unknown:
        outcome, source, owner = outcomes.claim_interrupted(), "running", worker_id
    elif row["state"] == "running" and judge_owners and row["owner_lost"] and row["worker_id"] != worker_id:
        outcome, source, owner = outcomes.worker_lost(), "running", row["worker_id"]
    else:
        return "duplicate"
    done = finalize_now(runtime, [final_of(row, idx, outcome, from_state=source, owner=owner)],
                        counter=worker_id)
    return outcome.state if done else "duplicate"


def end_unrun(runtime: Runtime, worker_id: str, batch_id: UUID, idx: int, outcome: Outcome) -> str:
    """A queued item → OUTCOME without running (a hard cap's refusal), with its usage event; the state, or
    "duplicate" if it had moved on."""
    with runtime.pool.connection() as conn:
        row = store.item_status(conn, batch_id, idx, runtime.settings.worker_lost_after_s)
    if row is None or row["state"] != "queued":
        return "duplicate"
    done = finalize_now(runtime, [final_of(row, idx, outcome, from_state="queued")], counter=worker_id)
    return outcome.state if done else "duplicate"
