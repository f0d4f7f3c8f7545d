"""`POST /v1/batches/estimate`: the submit's checks, items per model and a cost bound, with nothing stored or run."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from typing import Any

import pytest

from tests.batches.extra_models import DEFAULT_LIMIT, PACED_PER_MINUTE, UNPACED_LIMIT, extra_models  # noqa: F401
from tests.batches.helpers import CHAT, submit, usage_events, wait_finished

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream", "extra_models")]

MESSAGE = {"model": "claude-sonnet", "max_tokens": 40, "messages": [{"role": "user", "content": "hello there"}]}


def estimate(client: Any, key: str, body: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/v1/batches/estimate", data=data, content_type="application/json",
                       headers={"Authorization": f"Bearer {key}"})


def _batches(runtime: Any) -> int:
    with runtime.pool.connection() as conn:
        return int(conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"])  # type: ignore[index]


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {**CHAT, "messages": [{"role": "user", "content": text}], **extra}


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_the_estimates_cost_is_never_below_what_the_batch_then_records(client, key, runtime, shape) -> None:
    if shape == "openai":  # limits of their own (answers cut short at 3 tokens, or well within 500), the model's
        requests = [_chat("word " * (5 + 7 * i), max_tokens=3 if i % 2 else 500) for i in range(10)]
        requests += [{**_chat(f"short {i}"), "model": "gpt-default-limit"} for i in range(4)]
        requests += [_chat("two ways", max_completion_tokens=8, max_tokens=2, n=1)]
    else:
        requests = [{**MESSAGE, "max_tokens": 2 + i, "system": "be brief " * i} for i in range(8)]
    body = {"shape": shape, "requests": requests}
    guess = estimate(client, key, body)
    assert guess.status_code == 200, guess.get_data(as_text=True)
    assert guess.json["valid"] and guess.json["total"] == len(requests) and guess.json["cost_usd_max"] is not None
    batch = wait_finished(client, key, submit(client, key, requests, shape=shape).json["id"])
    assert batch["counts"]["completed"] == len(requests)
    events = usage_events(runtime, batch["id"])
    for model in guess.json["models"]:
        mine = [e for e in events if e["model_requested"] == model["model"]]
        assert len(mine) == model["items"] and model["runs"] and model["priced"]
        assert sum(e["input_tokens"] for e in mine) <= model["input_tokens_max"]
        assert sum(e["output_tokens"] for e in mine) <= model["output_tokens_max"]
        assert Decimal(sum(e["cost_nanos"] for e in mine)) / 10**9 <= Decimal(model["cost_usd_max"])
    assert Decimal(batch["cost_usd"]) <= Decimal(guess.json["cost_usd_max"])
    truncated = [e for e in events if e["output_tokens"] == 3]
    assert shape != "openai" or len(truncated) == 5  # the bound is met exactly where the answers hit their limit


def test_the_estimate_tells_where_items_run_and_why_others_would_be_discarded(client, key, make_key) -> None:
    requests = [_chat("a", max_tokens=10), _chat("b"), {**CHAT, "model": "no-such-model"},
                {**CHAT, "model": "retired"}, {**CHAT, "model": "claude-sonnet"}, {**CHAT, "model": "unpriced-chat"},
                {**CHAT, "model": "gpt-default-limit", "n": 3}]
    found = estimate(client, key, {"shape": "openai", "requests": requests}).json
    models = {m["model"]: m for m in found["models"]}
    assert models["gpt-4o-mini"]["binding"] == {"host": "openai", "adapter": "openai",
                                                "upstream_model": "gpt-4o-mini-2024"}
    assert (models["gpt-4o-mini"]["items"], models["gpt-4o-mini"]["items_without_output_limit"]) == (2, 1)
    assert models["gpt-4o-mini"]["cost_usd_max"] is None and found["cost_usd_max"] is None  # "b" has no limit
    assert {name: m["problem"]["code"] for name, m in models.items() if not m["runs"]} == {
        "no-such-model": "model_not_found", "retired": "no_binding", "claude-sonnet": "cross_shape_dispatch"}
    assert models["no-such-model"]["cost_usd_max"] == "0.000000000"
    assert not models["unpriced-chat"]["priced"] and models["unpriced-chat"]["cost_usd_max"] is None
    assert models["gpt-default-limit"]["output_tokens_max"] == 3 * DEFAULT_LIMIT  # n choices of the default
    narrow = estimate(client, make_key("narrow")["key"], {"shape": "anthropic", "requests": [MESSAGE]}).json
    assert narrow["models"][0]["problem"]["code"] == "model_not_allowed"


@pytest.mark.parametrize("body", [
    {"shape": "openai", "requests": []},
    {"shape": "openai", "requests": [{**CHAT, "stream": True}, {"model": "x"}]},
    {"shape": "nope", "requests": [CHAT]},
    {"shape": "openai", "requests": [CHAT], "max_cost": -1},
    {"shape": "openai", "requests": [CHAT, {**CHAT, "model": "unpriced-chat"}], "max_cost": 1},
    {"input_file_id": "file-abc", "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    b'{"shape": "openai", "requests": [',
    b"[1, 2]",
])
def test_a_body_a_submit_refuses_gets_the_submits_own_answer_and_nothing_is_stored_or_run(
        client, key, runtime, upstream, body) -> None:
    before = _batches(runtime)
    guess = estimate(client, key, body)
    assert 400 <= guess.status_code < 500 and guess.json["error"]["code"], guess.get_data(as_text=True)
    if not isinstance(body, dict) or "input_file_id" not in body:  # OpenAI's create is not an estimate's body
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        submitted = client.post("/v1/batches", data=data, content_type="application/json",
                                headers={"Authorization": f"Bearer {key}"})
        assert (guess.status_code, guess.json) == (submitted.status_code, submitted.json)
    assert _batches(runtime) == before and upstream.stats()["total"] == 0


def test_an_estimate_stores_and_runs_nothing_and_needs_a_credential(client, key, runtime, upstream) -> None:
    before = _batches(runtime)
    assert estimate(client, key, {"shape": "openai", "requests": [CHAT] * 50}).json["total"] == 50
    assert _batches(runtime) == before and upstream.stats()["total"] == 0
    anonymous = client.post("/v1/batches/estimate", json={"shape": "openai", "requests": [CHAT]})
    assert anonymous.status_code == 401
    as_text = client.post("/v1/batches/estimate", data="x", content_type="text/plain",
                          headers={"Authorization": f"Bearer {key}"})
    assert as_text.status_code == 415 and as_text.json["error"]["code"] == "unsupported_media_type"


def test_the_timing_tells_how_long_a_paced_batch_takes_and_how_many_items_an_unpaced_one_loses(client, make_key,
                                                                                                upstream) -> None:
    paced = estimate(client, make_key("estimate-paced")["key"], {"shape": "openai", "requests": [CHAT] * 90}).json
    timing = paced["timing"]
    per_minute = PACED_PER_MINUTE // 2  # the batch share
    assert timing["policy_paced"] and timing["share"] == 0.5 and timing["items_per_minute"] == per_minute
    assert 2 * 60 - 2 <= timing["paced_seconds"] <= 3 * 60  # 90 items: three minutes' shares, the first one begun
    assert timing["unpaced_rate_limited_items"] == 90 - per_minute  # without pacing: one window's share at once

    if time.time() % 3600 > 3590:  # the unpaced policy's hour window must not turn between estimate and run
        time.sleep(15)
    key = make_key("estimate-unpaced")["key"]
    unpaced = estimate(client, key, {"shape": "openai", "requests": [CHAT] * 10}).json["timing"]
    assert not unpaced["policy_paced"] and unpaced["unpaced_rate_limited_items"] == 10 - UNPACED_LIMIT
    assert unpaced["paced_seconds"] > 0  # paced, the items past this hour's limit would wait for the next
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 10).json["id"])
    refused = [i for i in batch["items"] if i["error_code"] == "rate_limited"]
    assert batch["counts"]["completed"] <= UNPACED_LIMIT and len(refused) == 10 - batch["counts"]["completed"]
    assert len(refused) >= unpaced["unpaced_rate_limited_items"]  # (a lease slice held by one worker may strand)
    again = estimate(client, key, {"shape": "openai", "requests": [CHAT] * 10}).json["timing"]
    assert again["unpaced_rate_limited_items"] == 10  # the window is spent
