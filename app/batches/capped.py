"""Claims of a hard-capped batch's items (`max_cost_mode: hard`, the default of a spend cap): the item's cost bound
is reserved against the cap with its claim, and released by its final state, so the recorded cost never passes it.

The bound is the estimate's (app/batches/estimate.py: input tokens ≤ the request's bytes, output ≤ its own limit or
its model's `max_output_tokens`, at the binding's rates, rounded as the usage event is). An item whose bound does
not fit beside what the batch has recorded ends `budget_exceeded` unrun (the recorded cost only grows); one that
fits only once running items release what they did not use waits for them; one without a bound ends
`budget_exceeded` too: it cannot run under a hard cap. Claims of one batch take its claim lock one at a time
(lifecycle.claim_reserved), so two workers never both find room for one item.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from app.access.cache import get_catalog
from app.batches import lifecycle, outcomes, store
from app.batches.estimate import item_cost_bound
from app.batches.outcomes import Outcome
from app.db import CONNECTION_ENDED, autocommit
from app.payload_port import PayloadMissing, PayloadStore
from app.runtime import Runtime

ROOM_WAIT_S = 0.2  # how often an item that fits once running items end looks again


@dataclass(frozen=True)
class CapClaim:
    """What claiming a hard-capped batch's item gave: its claim row, or the outcome it ends with unrun, or neither
    (the claim failed for another reason: the item was taken, the batch cancelled or past its deadline)."""

    row: dict[str, Any] | None = None
    refused: Outcome | None = None


def is_hard(info: dict[str, Any] | None) -> bool:
    """Whether a batch (its run info) has a hard spend cap."""
    return info is not None and info["max_cost_nanos"] is not None and info["max_cost_mode"] == "hard"


def claim_capped(runtime: Runtime, payloads: PayloadStore, info: dict[str, Any], key: tuple[UUID, int], *,
                 worker_id: str, counter: str, stopping: threading.Event,
                 retries: lifecycle.ClaimRetries) -> CapClaim:
    """Claim item KEY of a hard-capped batch (INFO: store.batch_run_info) with its cost bound reserved, waiting
    while it fits only once running items release their reservations (at most about as long as they can run).

    An attempt whose connection ended is tried again as RETRIES say, as an item's plain claim is; one that committed
    unseen left the item running under WORKER_ID with its bound reserved on its row, and is adopted (the final
    state releases the bound from that row)."""
    batch_id, idx = key
    try:
        body = payloads.read_request(batch_id, idx)
    except PayloadMissing:
        return CapClaim()  # the claim path without a bound settles it (load_input_failed once claimed elsewhere)
    bound = item_cost_bound(get_catalog(runtime).snapshot(), info["policy_id"], info["shape"], body)
    if bound is None:
        return CapClaim(refused=outcomes.budget_unbounded())
    settings = runtime.settings
    give_up = time.monotonic() + settings.batch_item_time_limit_s + 2 * settings.worker_lost_after_s + 60
    while True:
        try:
            with autocommit(runtime.pool) as conn:
                row = retries.adopted(conn, lifecycle.claim_reserved(conn, batch_id, idx, worker_id, counter, bound))
                room = store.cap_room(conn, batch_id) if row is None else None
        except CONNECTION_ENDED as exc:
            retries.wait(exc)
            continue
        if row is not None:
            return CapClaim(row=row)
        if room is None:
            return CapClaim()
        if bound + int(room["spent"]) > int(room["cap"]):
            return CapClaim(refused=outcomes.budget_exceeded(bound))
        if bound + int(room["spent"]) + int(room["reserved"]) <= int(room["cap"]) or time.monotonic() > give_up:
            return CapClaim()  # room enough: the claim failed for another reason
        stopping.wait(ROOM_WAIT_S)
