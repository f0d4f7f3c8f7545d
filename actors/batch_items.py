"""The batch item actor, and the middleware that gives each worker process its runtime and background threads
(dispatcher, listener for submits and cancels, heartbeat + reaper, time-limit watchdog)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any
from uuid import UUID

import dramatiq
from dramatiq.middleware import Middleware
from dramatiq.middleware.time_limit import TimeLimitExceeded

from actors.broker import get_broker
from app.batches.dispatch import Dispatcher
from app.batches.monitor import Heartbeat, Listener, Periodic, watchdog
from app.batches.runner import WorkerContext, finalize_by_key, run_item, time_limit_outcome
from app.batches.service import payload_store
from app.observability.logs import log_context
from app.observability.metrics import start_worker_metrics_server
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("relay.actors.batch_items")
_settings = Settings.from_env()
_broker = get_broker()  # actors bind to the global broker at import: build it first
_state: dict[str, Any] = {}  # this process's WorkerContext and threads, set when the worker boots
BACKSTOP_MARGIN_S = 30  # Dramatiq's own time limit fires this long after the item's (which stops it first)


@dramatiq.actor(queue_name=_settings.queue_name, max_retries=0,
                time_limit=int((_settings.batch_item_time_limit_s + BACKSTOP_MARGIN_S) * 1000))
def run_batch_item(batch_id: str, idx: int) -> None:
    """Run one batch item; always returns normally (the outcome is recorded in Postgres)."""
    ctx = worker_context()
    try:
        with log_context(batch_id=batch_id, idx=idx):
            run_item(ctx, UUID(batch_id), int(idx))
    except TimeLimitExceeded:  # the backstop: our own deadline should have stopped the item first
        finalize_by_key(ctx.runtime, UUID(batch_id), int(idx), time_limit_outcome(), owner=ctx.worker_id)
    except Exception:
        log.exception("batch item %s:%s: unexpected error (left to the reaper)", batch_id, idx)


def encode_message(batch_id: UUID, idx: int) -> bytes:
    """The message body for one item, as Dramatiq itself would encode it."""
    return run_batch_item.message(str(batch_id), idx).encode()


def worker_context() -> WorkerContext:
    """This process's context, built on first use if the boot hook did not run (e.g. a stub broker in tests)."""
    ctx = _state.get("ctx")
    if ctx is None:
        ctx = _state["ctx"] = _build_context(threads=8)
    return ctx  # type: ignore[no-any-return]


def _build_context(threads: int) -> WorkerContext:
    # Threads hold a connection only for a statement at a time: past RELAY_DB_POOL_MAX they wait briefly
    # instead of opening hundreds of Postgres connections.
    runtime = Runtime.build(_settings, pool_max=min(threads, _settings.db_pool_max) + 6)
    worker_id = _settings.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return WorkerContext(runtime=runtime, worker_id=worker_id, payloads=payload_store(runtime))


class BatchWorkerBoot(Middleware):
    """Per worker process: runtime, dispatcher, listener, heartbeat/reaper and watchdog threads."""

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        ctx = _state["ctx"] = _build_context(threads=worker.worker_threads)
        dispatcher = Dispatcher(ctx.runtime, encode_message, _ensure_queue)
        ctx.on_finalized = dispatcher.item_finished
        beats = Heartbeat(ctx)
        heartbeat = Periodic("relay-heartbeat", _settings.worker_heartbeat_s, beats, on_stop=beats.close)
        heartbeat.tick()  # registered before the first item is claimed
        threads: dict[str, Dispatcher | Listener | Periodic] = {
            "dispatcher": dispatcher, "listener": Listener(ctx, on_submit=dispatcher.wake), "heartbeat": heartbeat,
            "watchdog": Periodic("relay-watchdog", 0.2, watchdog(ctx)),
        }
        for thread in threads.values():
            thread.start()
        _state["threads"] = threads
        start_worker_metrics_server(ctx.runtime)
        log.info("batch worker %s ready (%d threads)", ctx.worker_id, worker.worker_threads)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        """Stop publishing; running items finish, still cancellable, owned (heartbeat) and time-limited."""
        dispatcher = _state.get("threads", {}).get("dispatcher")
        if dispatcher is not None:
            dispatcher.stop()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        threads, ctx = _state.get("threads", {}), _state.get("ctx")
        for name in ("listener", "heartbeat", "watchdog"):
            if name in threads:
                threads[name].stop()
        if ctx is not None:
            from app.batches import store

            with ctx.runtime.pool.connection() as conn:
                store.remove_worker(conn, ctx.worker_id)
            ctx.runtime.close()


def _ensure_queue() -> None:
    _broker.declare_queue(_settings.queue_name, ensure=True)


_broker.add_middleware(BatchWorkerBoot())
