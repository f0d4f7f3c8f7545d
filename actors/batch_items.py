"""The batch item actor: a message names a few items of one batch; they run through `app.batches.runner`."""

from __future__ import annotations

import logging
from uuid import UUID

import dramatiq
from dramatiq.middleware import CurrentMessage
from dramatiq.middleware.time_limit import TimeLimitExceeded

from actors.boot import worker_context
from actors.broker import get_broker
from actors.publisher import ITEM_ACTOR, TRACE_OPTION
from app.batches import outcomes
from app.batches.dispatch import MAX_GROUP
from app.batches.finals import finalize_by_key
from app.batches.messages import run_items
from app.settings import Settings

log = logging.getLogger("relay.actors.batch_items")
_settings = Settings.from_env()
_broker = get_broker()  # actors bind to the global broker at import: build it first
BACKSTOP_MARGIN_S = 30  # Dramatiq's own time limit fires this long after every item's own limit could have


@dramatiq.actor(actor_name=ITEM_ACTOR, queue_name=_settings.queue_name, max_retries=0,
                time_limit=int((_settings.batch_item_time_limit_s * MAX_GROUP + BACKSTOP_MARGIN_S) * 1000))
def run_batch_items(batch_id: str, idxs: list[int]) -> None:
    """Run some items of one batch; always returns normally (outcomes are recorded in Postgres). Items not started
    because the worker is stopping go back to the queue for another worker."""
    ctx = worker_context()
    message = CurrentMessage.get_current_message()
    trace = message.options.get(TRACE_OPTION) if message is not None else None
    try:
        rest = run_items(ctx, UUID(batch_id), [int(i) for i in idxs], trace=trace)
    except TimeLimitExceeded:  # the backstop: our own deadlines should have stopped every item first
        for idx in idxs:
            finalize_by_key(ctx.runtime, UUID(batch_id), int(idx), outcomes.time_limit(), owner=ctx.worker_id,
                            counter=ctx.worker_id)
        return
    except Exception:
        log.exception("batch items %s:%s: unexpected error (left to the reaper)", batch_id, idxs)
        return
    if rest:
        run_batch_items.send(batch_id, rest)


@dramatiq.actor(queue_name=_settings.queue_name, max_retries=0,
                time_limit=int((_settings.batch_item_time_limit_s + BACKSTOP_MARGIN_S) * 1000))
def run_batch_item(batch_id: str, idx: int) -> None:
    """One item, as messages published before items were grouped name it (still in queues after an upgrade)."""
    run_batch_items(batch_id, [idx])
