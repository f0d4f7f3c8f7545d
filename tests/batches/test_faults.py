"""Nothing accepted is lost: batches committed while no worker runs, and workers killed mid-item."""


from __future__ import annotations

import os
import signal
from decimal import Decimal

import pytest

from devtools.processes import start_workers
from devtools.waiting import until
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, submit, usage_events, wait_finished

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
    until(lambda: upstream.stats()["in_flight"] == 1, what="the item calling the upstream")
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
    until(lambda: upstream.stats()["in_flight"] == 2, what="both items calling the upstream")
    workers.proc.send_signal(signal.SIGTERM)  # what a container runtime sends to the main process
    assert workers.proc.wait(30) == 0
    batch = wait_finished(client, key, batch_id, timeout=5)
    assert batch["counts"]["completed"] == 2
    upstream.forget("sk-batch-slow")


def test_a_killed_workers_reservation_under_a_hard_cap_is_released_and_the_next_item_runs(
        client, make_key, upstream, settings_env, runtime, tmp_path_factory) -> None:
    key = make_key("slow")["key"]
    upstream.reset()
    item = {**CHAT, "max_tokens": 16}
    guess = client.post("/v1/batches/estimate", json={"shape": "openai", "requests": [item]},
                        headers={"Authorization": f"Bearer {key}"}).json
    bound = Decimal(guess["cost_usd_max"])
    upstream.control("sk-batch-slow", latency_ms=30_000)
    logs = tmp_path_factory.mktemp("workers")
    doomed = start_workers(settings_env, logs, runtime, processes=1, threads=2,
                           **{**WORKER_SETTINGS, "batch_item_time_limit_s": 60})
    batch_id = submit(client, key, [item, item], max_cost=float(bound * 3 / 2)).json["id"]  # room for one bound
    until(lambda: upstream.stats()["in_flight"] == 1, what="the first item calling the upstream")
    os.killpg(doomed.proc.pid, signal.SIGKILL)
    doomed.proc.wait(10)
    upstream.control("sk-batch-slow", latency_ms=0)
    survivor = start_workers(settings_env, logs, runtime, processes=1, threads=2, **WORKER_SETTINGS)
    try:  # the second item waits for the dead claim's reservation until the reaper ends it as worker lost
        batch = wait_finished(client, key, batch_id, timeout=60)
    finally:
        survivor.stop()
    ended = sorted((i["state"], i["error_code"] or "") for i in batch["items"])  # either item may have run first
    assert ended == [("completed", ""), ("discarded", "worker_lost")]
    with runtime.pool.connection() as conn:
        held = conn.execute("SELECT coalesce(sum(reserved_nanos), 0) AS n FROM batch_progress WHERE batch_id = %s",
                            (batch_id,)).fetchone()
    assert held["n"] == 0 and Decimal(batch["cost_usd"]) <= bound * 3 / 2  # type: ignore[index]
