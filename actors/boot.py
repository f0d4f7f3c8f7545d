"""The worker boot middleware: gives each worker process its context (runtime, payload store, group writer) and
its background threads (dispatcher, listener for submits and cancels, heartbeat + reaper, time-limit watchdog)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from actors.delivery_worker import WORKER_TIMEOUT_MS, is_delivery_worker
from actors.publisher import RabbitPublisher
from app.batches import outbox
from app.batches.dispatch import Dispatcher
from app.batches.monitor import WATCHDOG_S, Heartbeat, Listener, Periodic, watchdog
from app.batches.runner import WorkerContext
from app.observability.metrics import start_worker_metrics_server
from app.runtime import Runtime, freeze_boot_heap
from app.settings import Settings
from app.wiring import plug_into_engine

log = logging.getLogger("relay.actors.boot")
_state: dict[str, Any] = {}  # this process's WorkerContext and threads, set when the worker boots


def worker_context() -> WorkerContext:
    """This process's context, built on first use if the boot hook did not run (e.g. a stub broker in tests)."""
    ctx = _state.get("ctx")
    if ctx is None:
        ctx = _state["ctx"] = build_context(Settings.from_env(), threads=8)
    return ctx  # type: ignore[no-any-return]


def build_context(settings: Settings, threads: int) -> WorkerContext:
    # Threads hold a connection only for a statement at a time: past RELAY_DB_POOL_MAX they wait briefly
    # instead of opening hundreds of Postgres connections.
    plug_into_engine()
    runtime = Runtime.build(settings, pool_max=min(threads, settings.db_pool_max) + 6)
    worker_id = settings.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return WorkerContext.create(runtime, worker_id, threads=threads)


class BatchWorkerBoot(Middleware):
    """Per worker process: context, dispatcher, listener, heartbeat/reaper and watchdog threads."""

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if is_delivery_worker(worker):
            return
        worker.worker_timeout = WORKER_TIMEOUT_MS  # read as it makes its threads and consumers, after this hook
        settings = Settings.from_env()
        ctx = _state["ctx"] = build_context(settings, threads=worker.worker_threads)
        publisher = RabbitPublisher(settings.broker_urls, settings.queue_name)  # the dispatcher's thread's own
        dispatcher = Dispatcher(ctx.runtime, publisher, item_seconds=lambda: ctx.item_seconds)
        ctx.finished.append(dispatcher.item_finished)
        beats = Heartbeat(ctx)
        ctx.judges = beats.steady
        heartbeat = Periodic("relay-heartbeat", settings.worker_heartbeat_s, beats, on_stop=beats.close)
        heartbeat.tick()  # registered before the first item is claimed
        threads: dict[str, Dispatcher | Listener | Periodic] = {
            "dispatcher": dispatcher, "listener": Listener(ctx, on_submit=dispatcher.wake), "heartbeat": heartbeat,
            "watchdog": Periodic("relay-watchdog", WATCHDOG_S, watchdog(ctx)),
        }
        for thread in threads.values():
            thread.start()
        _state["threads"] = threads
        start_worker_metrics_server(ctx.runtime)
        log.info("batch worker %s ready (%d threads)", ctx.worker_id, worker.worker_threads)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        freeze_boot_heap()  # every middleware has built its part by now

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        """Stop publishing and starting items; running items finish, still cancellable, owned and time-limited."""
        if is_delivery_worker(worker):
            return
        ctx = _state.get("ctx")
        if ctx is not None:
            ctx.stopping.set()
        dispatcher = _state.get("threads", {}).get("dispatcher")
        if dispatcher is not None:
            dispatcher.stop()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if is_delivery_worker(worker):
            return
        threads, ctx = _state.get("threads", {}), _state.get("ctx")
        if ctx is not None:
            ctx.writer.close()
        for name in ("listener", "heartbeat", "watchdog"):
            if name in threads:
                threads[name].stop()
        if ctx is not None:
            with ctx.runtime.pool.connection() as conn:
                outbox.remove_worker(conn, ctx.worker_id)
            ctx.runtime.close()
