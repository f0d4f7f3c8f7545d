"""A batch's spend cap (`max_cost`): dollars to the nano-dollars costs are recorded in, the check at submit that
every binding its items may run on is priced, and what happens once the recorded cost reaches the cap.

The cost of a batch's items is summed by the group commit into `batch_progress.cost_nanos` (app/usage/writer.py),
and the claim (store._CLAIM) starts no item of a batch whose sum reached its cap. The first worker that finds an
item so refused discards every queued item of the batch at once (`budget_exceeded`) and stops its publishing;
running items finish. So a batch spends less than its cap plus what its items in flight at that moment cost: at most
one item per worker thread (each thread waits for its item's final state to commit before it claims the next).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_FLOOR, Decimal
from typing import Any
from uuid import UUID

from app.access.cache import get_catalog
from app.batches import outcomes, store
from app.batches.errors import MaxCostUnpriced
from app.batches.finals import cancel_queued
from app.runtime import Runtime

NANOS_PER_DOLLAR = 10**9


def to_nanos(dollars: float) -> int:
    """A cap in dollars as whole nano-dollars (rounded down: the cap never grows), from its shortest decimal form."""
    return int((Decimal(repr(float(dollars))) * NANOS_PER_DOLLAR).to_integral_value(ROUND_FLOOR))


def cap_mode(row: dict[str, Any]) -> str:
    """A capped batch's `max_cost_mode`: its own, or `soft` for a batch capped before the hard cap existed."""
    return row.get("max_cost_mode") or "soft"


def overshoot(row: dict[str, Any]) -> str | None:
    """What a capped batch may record past its cap, in words: nothing (hard), or the soft cap's bound."""
    if row["max_cost_nanos"] is None:
        return None
    if cap_mode(row) == "hard":
        return "none: each item's cost bound is reserved before it starts"
    return ("the cost of the items in flight when the cap is reached: at most one per worker thread of every worker"
            " process, each at its own cost (unbounded for an item without an output limit)")


def to_dollars(nanos: int | None) -> float | None:
    """Nano-dollars as dollars (a JSON number)."""
    return None if nanos is None else nanos / NANOS_PER_DOLLAR


def unpriced_models(runtime: Runtime, models: Iterable[str]) -> list[str]:
    """Which of MODELS (names callers use) have an enabled binding without pricing; models that do not exist or are
    disabled are not among them (their items are discarded unrun, at no cost)."""
    known = get_catalog(runtime).snapshot().models
    found = []
    for name in sorted(set(models)):
        model = known.get(name)
        if model is not None and model.enabled and any(
                b.pricing is None for b in model.bindings if b.enabled and b.host.enabled):
            found.append(name)
    return found


def check_priced(runtime: Runtime, models: Iterable[str]) -> None:
    """MaxCostUnpriced (400) naming the models of a capped batch whose cost could not be counted."""
    unpriced = unpriced_models(runtime, models)
    if unpriced:
        shown = ", ".join(unpriced[:10]) + (f" (and {len(unpriced) - 10} more)" if len(unpriced) > 10 else "")
        raise MaxCostUnpriced(message=f"max_cost needs priced bindings: {shown} has an unpriced binding, so the"
                                      " batch's cost could not be counted", details={"models": unpriced})


def discard_unstarted(runtime: Runtime, batch_id: UUID) -> int:
    """Every queued item of a batch whose cap was reached → discarded `budget_exceeded` (one usage event each), and
    nothing more of it published; how many. The batch row is locked first, as cancel does."""
    with runtime.pool.connection() as conn, conn.transaction():
        row = store.lock_batch(conn, batch_id)
        if row is None:
            return 0
        done = cancel_queued(conn, row, outcomes.budget_exceeded())
        store.stop_publishing(conn, batch_id)
    return done
