"""Nothing accepted is lost: batches committed while no worker runs, and workers killed mid-item."""


from __future__ import annotations

import os
import signal

import pytest

from devtools.processes import start_workers
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, submit, usage_events, wait_finished, wait_for

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


def test_a_batch_committed_while_no_worker_runs_is_published_when_one_starts(client, key, settings_env, runtime,
                                                                            catalog, tmp_path_factory) -> None:
    batch_id = submit(client, key, [CHAT] * 3).json["id"]
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM batch_items WHERE batch_id = %s AND published_at IS NULL",
                           (batch_id,)).fetchone()
    assert row["n"] == 3  # the API published nothing: a crash after the commit loses nothing
    workers = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=2,
                            **WORKER_SETTINGS)
    try:
        assert wait_finished(client, key, batch_id)["counts"]["completed"] == 3
    finally:
        workers.stop()


def test_an_item_whose_worker_was_killed_is_discarded_as_worker_lost_and_never_rerun(
        client, make_key, upstream, settings_env, runtime, tmp_path_factory) -> None:
    key = make_key("slow")["key"]
    upstream.reset()
    upstream.control("sk-batch-slow", latency_ms=30_000)
    logs = tmp_path_factory.mktemp("workers")
    doomed = start_workers(settings_env, logs, runtime, processes=1, threads=2,
                           **{**WORKER_SETTINGS, "batch_item_time_limit_s": 60})
    batch_id = submit(client, key, [CHAT]).json["id"]
    wait_for(lambda: upstream.stats()["in_flight"] == 1, what="the item calling the upstream")
    os.killpg(doomed.proc.pid, signal.SIGKILL)
    doomed.proc.wait(10)
    survivor = start_workers(settings_env, logs, runtime, processes=1, threads=2, **WORKER_SETTINGS)
    try:
        batch = wait_finished(client, key, batch_id, timeout=30)
    finally:
        survivor.stop()
    (item,) = batch["items"]
    assert item["state"] == "discarded" and item["error_code"] == "worker_lost"
    assert item["error"].startswith("worker lost")
    assert [e["error_code"] for e in usage_events(runtime, batch_id)] == ["worker_lost"]
    assert upstream.stats()["total"] == 1


def test_a_worker_stopped_with_sigterm_finishes_its_running_items_first(client, make_key, upstream, settings_env,
                                                                        runtime, tmp_path_factory) -> None:
    key = make_key("slow")["key"]
    upstream.reset()
    upstream.control("sk-batch-slow", latency_ms=1500)
    workers = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=2,
                            **WORKER_SETTINGS)
    batch_id = submit(client, key, [CHAT, CHAT]).json["id"]
    wait_for(lambda: upstream.stats()["in_flight"] == 2, what="both items calling the upstream")
    workers.proc.send_signal(signal.SIGTERM)  # what a container runtime sends to the main process
    assert workers.proc.wait(30) == 0
    batch = wait_finished(client, key, batch_id, timeout=5)
    assert batch["counts"]["completed"] == 2
    upstream.forget("sk-batch-slow")
