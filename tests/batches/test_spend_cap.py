"""A batch's spend cap (`max_cost`) on real workers, with a priced model on the fake upstream."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from devtools.processes import start_workers
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.extra_models import extra_models  # noqa: F401 (a fixture)
from tests.batches.helpers import CHAT, submit, usage_events, wait_finished

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream", "extra_models")]

TOKENS = 1000  # input and output tokens of every call (the fake upstream's usage control)
ITEM_NANOS = TOKENS * 150 + TOKENS * 600  # at PRICED: $0.15 and $0.60 per million tokens, in nano-dollars
IN_FLIGHT = 2 * 4  # items run at once by the workers fixture of tests/batches/conftest.py: 2 processes x 4 threads
# An item whose cost bound holds the fake upstream's forced usage: more than TOKENS bytes, at most TOKENS out.
BOUNDED = {**CHAT, "max_tokens": TOKENS, "messages": [{"role": "user", "content": "x" * TOKENS}]}


def _priced_calls(upstream: Any, latency_ms: int = 60) -> None:
    upstream.control("sk-batch-ok", latency_ms=latency_ms, usage={"input_tokens": TOKENS, "output_tokens": TOKENS})


def test_a_soft_cap_stops_a_batch_within_its_bound_of_the_items_in_flight_times_their_cost(client, key, runtime,
                                                                                              upstream) -> None:
    _priced_calls(upstream)
    cap_nanos = ITEM_NANOS * 11 // 2  # five and a half items
    res = submit(client, key, [CHAT] * 60, max_cost=cap_nanos / 1e9, max_cost_mode="soft")
    assert res.status_code == 202, res.get_data(as_text=True)
    assert (res.json["max_cost"], res.json["max_cost_mode"]) == (cap_nanos / 1e9, "soft")
    assert "one per worker thread" in res.json["max_cost_overshoot"]  # its bound said in the answer
    batch = wait_finished(client, key, res.json["id"])
    events = usage_events(runtime, batch["id"])
    spent = sum(e["cost_nanos"] or 0 for e in events)
    assert len(events) == 60  # one usage event per item, the discarded ones included
    assert cap_nanos <= spent <= cap_nanos + IN_FLIGHT * ITEM_NANOS
    completed = [i for i in batch["items"] if i["state"] == "completed"]
    stopped = [i for i in batch["items"] if i["state"] == "discarded"]
    assert len(completed) == spent // ITEM_NANOS and len(completed) + len(stopped) == 60
    assert stopped and all(i["error_code"] == "budget_exceeded" for i in stopped)
    assert all(i["started_at"] is None for i in stopped)  # none of them ever started
    assert upstream.stats()["total"] == len(completed)
    assert Decimal(batch["cost_usd"]) * 10**9 == spent  # the running sum matches the usage events


def test_a_batch_under_its_cap_runs_every_item(client, key, upstream) -> None:
    _priced_calls(upstream, latency_ms=0)
    res = submit(client, key, [BOUNDED] * 5, max_cost=1)
    assert res.json["max_cost_mode"] == "hard" and res.json["max_cost_overshoot"].startswith("none")  # the default
    batch = wait_finished(client, key, res.json["id"])
    assert batch["counts"]["completed"] == 5 and Decimal(batch["cost_usd"]) * 10**9 == 5 * ITEM_NANOS


def _reserved(runtime: Any, batch_id: str) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT coalesce(sum(reserved_nanos), 0) AS n FROM batch_progress WHERE batch_id = %s",
                           (batch_id,)).fetchone()
    return int(row["n"])  # type: ignore[index]


def test_a_hard_cap_is_never_passed_with_four_worker_processes_running_the_batch(
        client, key, runtime, upstream, settings_env, tmp_path) -> None:
    more = start_workers(settings_env, tmp_path, runtime, processes=2, threads=4, **WORKER_SETTINGS)
    try:  # the module's 2 processes and these 2: 16 threads that could each start an item of the batch at once
        _priced_calls(upstream)
        cap_nanos = ITEM_NANOS * 11 // 2  # five and a half items: in soft mode up to 5.5 + 16 items could be recorded
        res = submit(client, key, [BOUNDED] * 60, max_cost=cap_nanos / 1e9)
        assert res.status_code == 202, res.get_data(as_text=True)
        batch = wait_finished(client, key, res.json["id"], timeout=60)
    finally:
        more.stop()
    events = usage_events(runtime, batch["id"])
    spent = sum(e["cost_nanos"] or 0 for e in events)
    assert len(events) == 60 and spent <= cap_nanos
    completed = [i for i in batch["items"] if i["state"] == "completed"]
    stopped = [i for i in batch["items"] if i["state"] == "discarded"]
    # each bound is a little above an item's cost (its bytes are more than its 1,000 input tokens): five fit, and
    # once they are recorded a sixth bound no longer fits beside them
    assert len(completed) == 5 and spent == 5 * ITEM_NANOS and len(stopped) == 55
    assert all(i["error_code"] == "budget_exceeded" and i["started_at"] is None for i in stopped)
    assert "does not fit" in stopped[0]["error"]
    assert upstream.stats()["total"] == 5 and _reserved(runtime, batch["id"]) == 0  # every reservation released


def test_under_a_hard_cap_an_item_without_an_output_bound_never_runs_and_soft_runs_it(client, key, upstream) -> None:
    _priced_calls(upstream, latency_ms=0)
    model_bound = {**CHAT, "model": "gpt-default-limit"}  # the catalog's max_output_tokens bounds it
    batch = wait_finished(client, key, submit(client, key, [CHAT, model_bound, BOUNDED], max_cost=1).json["id"])
    states = [(i["state"], i["error_code"]) for i in batch["items"]]
    assert states == [("discarded", "budget_exceeded"), ("completed", None), ("completed", None)]
    assert "has no bound" in batch["items"][0]["error"] and upstream.stats()["total"] == 2
    soft = wait_finished(client, key, submit(client, key, [CHAT], max_cost=1, max_cost_mode="soft").json["id"])
    assert soft["counts"]["completed"] == 1


@pytest.mark.parametrize("mode", ["firm", "", 1, None])
def test_a_bad_max_cost_mode_is_a_400_naming_it(client, key, mode) -> None:
    res = submit(client, key, [BOUNDED], max_cost=1, max_cost_mode=mode)
    if mode is None:  # null: the default
        assert res.status_code == 202 and res.json["max_cost_mode"] == "hard"
        return
    assert res.status_code == 400 and res.json["error"]["code"] == "invalid_batch", res.get_data(as_text=True)
    assert [d["field"] for d in res.json["error"]["details"]] == ["max_cost_mode"]


def test_a_cap_on_a_model_with_an_unpriced_binding_is_refused_at_submit_with_nothing_stored(client, key,
                                                                                            runtime) -> None:
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]  # type: ignore[index]
    res = submit(client, key, [CHAT, {**CHAT, "model": "unpriced-chat"}], max_cost=5)
    assert res.status_code == 400 and res.json["error"]["code"] == "max_cost_unpriced"
    assert res.json["error"]["details"] == {"models": ["unpriced-chat"]}
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before  # type: ignore[index]
    assert submit(client, key, [{**CHAT, "model": "unpriced-chat"}]).status_code == 202  # without a cap: fine
    assert submit(client, key, [CHAT, {**CHAT, "model": "no-such-model"}], max_cost=5).status_code == 202


@pytest.mark.parametrize("value", [0, -1, 1e-10, 1e10, "1", True, [1], {"usd": 1}])
@pytest.mark.parametrize("item", [CHAT, {**CHAT, "model": "modèle"}], ids=["typed", "scanned"])  # non-ASCII: scanner
def test_a_bad_max_cost_is_a_400_naming_it(client, key, value, item) -> None:
    res = submit(client, key, [item], max_cost=value)
    assert res.status_code == 400 and res.json["error"]["code"] == "invalid_batch", res.get_data(as_text=True)
    assert [d["field"] for d in res.json["error"]["details"]] == ["max_cost"]
    assert submit(client, key, [item], max_cost=0.5).status_code == 202  # the same body with a good cap


def test_a_max_cost_out_of_a_doubles_range_is_invalid_json(client, key) -> None:
    body = b'{"shape": "openai", "max_cost": 1e999, "requests": [%s]}' % json.dumps(CHAT).encode()
    res = client.post("/v1/batches", data=body, content_type="application/json",
                      headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 400 and res.json["error"]["code"] == "invalid_json"
    good = client.post("/v1/batches", data=body.replace(b"1e999", b"1e2"), content_type="application/json",
                       headers={"Authorization": f"Bearer {key}"})
    assert good.status_code == 202 and good.json["max_cost"] == 100
