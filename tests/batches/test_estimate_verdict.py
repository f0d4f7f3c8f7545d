"""The estimate gives the submit's verdict: the same checks (callbacks included), no 5xx on any number, and whether
the batch can start every item within its completion_window under today's limits."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adapters.fields import MAX_CHOICES, MAX_TOKEN_LIMIT
from tests.batches.extra_models import PACED_PER_MINUTE, extra_models  # noqa: F401 (a fixture)
from tests.batches.helpers import CHAT

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("extra_models")]
MESSAGE = {"model": "claude-sonnet", "max_tokens": 40, "messages": [{"role": "user", "content": "hello there"}]}
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def _post(client: Any, key: str, path: str, body: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, data=data, content_type="application/json", headers={"Authorization": f"Bearer {key}"})


def _verdicts(client: Any, key: str, body: Any) -> tuple[Any, Any]:
    return _post(client, key, "/v1/batches/estimate", body), _post(client, key, "/v1/batches", body)


HUGE = [
    ("openai", {**CHAT, "max_tokens": 10**25}, "max_tokens"),
    ("openai", {**CHAT, "max_tokens": 2**63 - 1}, "max_tokens"),
    ("openai", {**CHAT, "max_tokens": 1000, "n": 10**25}, "n"),
    ("openai", {**CHAT, "max_completion_tokens": 10**300}, "max_completion_tokens"),
    ("openai", {**CHAT, "model": "modèle", "max_tokens": 10**25}, "max_tokens"),  # non-ASCII: the scanner's path
    ("anthropic", {**MESSAGE, "max_tokens": 10**25}, "max_tokens"),
    ("openai_responses", {"model": "gpt-5-responses", "input": "hi", "max_output_tokens": 10**25},
     "max_output_tokens"),
]


@pytest.mark.parametrize(("shape", "item", "field"), HUGE)
@pytest.mark.parametrize("max_cost", [None, 1])
def test_a_number_past_the_cap_is_the_same_400_from_the_estimate_and_the_submit(client, key, runtime, shape, item,
                                                                                field, max_cost) -> None:
    body = {"shape": shape, "requests": [CHAT if shape == "openai" else item, item],
            **({"max_cost": max_cost} if max_cost else {})}
    guess, made = _verdicts(client, key, body)
    assert guess.status_code == made.status_code == 400, (guess.get_data(as_text=True), made.get_data(as_text=True))
    assert guess.json == made.json and made.json["error"]["code"] == "invalid_batch"
    huge = [1] if shape == "openai" else [0, 1]
    assert [(d["idx"], d["field"]) for d in made.json["error"]["details"]] == [(idx, field) for idx in huge]


def test_the_largest_numbers_allowed_are_estimated_and_submitted(client, key) -> None:
    item = {**CHAT, "max_tokens": MAX_TOKEN_LIMIT, "n": MAX_CHOICES}
    guess, made = _verdicts(client, key, {"shape": "openai", "requests": [item] * 3, "max_cost": 1})
    assert guess.status_code == 200 and made.status_code == 202, guess.get_data(as_text=True)
    assert guess.json["output_tokens_max"] == 3 * MAX_TOKEN_LIMIT * MAX_CHOICES
    assert guess.json["within_max_cost"] is False and float(guess.json["cost_usd_max"]) > 1


@pytest.mark.parametrize("requests", [[CHAT], [{"model": "gpt-4o-mini", "messages": []}]], ids=["valid", "invalid"])
@pytest.mark.parametrize("extra", [
    {"callback_url": "http://hooks.example.com/x", "callback_secret": SECRET},
    {"callback_url": "http://127.0.0.1/x", "callback_secret": SECRET},
    {"callback_url": "ftp://hooks.example.com/x", "callback_secret": SECRET},
    {"callback_url": "http://hooks.example.com/x"},
    {"completion_window": "0s"},
    {"max_cost_mode": "firm", "max_cost": 1},
], ids=["host", "loopback", "scheme", "no-secret", "window", "mode"])
def test_the_estimate_refuses_what_the_submit_refuses_with_the_same_answer(client, key, runtime, requests,
                                                                         extra) -> None:
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]  # type: ignore[index]
    guess, made = _verdicts(client, key, {"shape": "openai", "requests": requests, **extra})
    assert made.status_code == 400 and guess.status_code == 400, made.get_data(as_text=True)
    assert guess.json == made.json
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before  # type: ignore[index]


def test_the_estimate_tells_whether_a_paced_batch_can_start_every_item_within_its_window(client, make_key) -> None:
    paced = str(make_key(policy="estimate-paced")["key"])  # PACED_PER_MINUTE a minute, half of it for batch items
    items = [CHAT] * 45
    short = _post(client, paced, "/v1/batches/estimate", {"shape": "openai", "requests": items,
                                                           "completion_window": "30s"}).json["deadline"]
    assert short["completion_window"] == "30s" and short["seconds"] == 30 and short["meets"] is False
    in_time = 45 - short["items_late"]
    assert 0 < in_time < 45 and in_time <= PACED_PER_MINUTE // 2 // 2 + PACED_PER_MINUTE // 2  # 30 s, plus a window's
    assert short["last_start_seconds"] > 30
    long = _post(client, paced, "/v1/batches/estimate", {"shape": "openai", "requests": items,
                                                          "completion_window": "1h"}).json["deadline"]
    assert long["meets"] is True and long["items_late"] == 0 and long["last_start_seconds"] <= 3600
    none = _post(client, paced, "/v1/batches/estimate", {"shape": "openai", "requests": items}).json
    assert none["deadline"] is None


def test_an_unpaced_policy_starts_every_item_at_once_so_its_window_is_met(client, key) -> None:
    said = _post(client, key, "/v1/batches/estimate", {"shape": "openai", "requests": [CHAT] * 5,
                                                       "completion_window": "1s"}).json["deadline"]
    assert said == {"completion_window": "1s", "seconds": 1, "last_start_seconds": 0, "meets": True,
                    "items_late": 0}
