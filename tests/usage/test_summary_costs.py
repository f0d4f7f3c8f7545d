"""The summary's cost and error counters say what happened: a group whose events have no price has cost `null`
(never a made-up zero), one whose calls all failed costs 0, and a cancelled batch item is `cancelled`, not an
error."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.auth import authenticate
from tests.usage.conftest import World, insert_event, new_key

pytestmark = pytest.mark.integration
T1 = datetime(2020, 5, 1, tzinfo=UTC)
WINDOW = {"from": "2020-05-01T00:00:00Z", "to": "2020-05-02T00:00:00Z"}


@pytest.fixture(scope="module")
def events(world: World, app: Any, runtime: Any, settings: Any) -> None:
    """The events of a key of their own (the other usage tests count every key's events)."""
    caller = authenticate(runtime, new_key(app.test_client(), settings, "service_account", "sa-bot", "p-main"))
    batch = uuid.uuid4()
    free = {"model_requested": "m-free", "input_tokens": 40, "output_tokens": 60}
    for hours, fields in ((1, free), (2, free),
                          (3, {"model_requested": "m-broken", "status": 502, "error_code": "upstream_error"}),
                          (4, {"model_requested": "m-gpt", "source": "batch", "batch_id": batch, "batch_idx": 0,
                               "status": 499, "error_code": "batch_cancelled"}),
                          (5, {"model_requested": "m-gpt", "source": "batch", "batch_id": batch, "batch_idx": 1,
                               "status": 499, "error_code": "batch_expired"}),
                          (6, {"model_requested": "m-gpt", "input_tokens": 10, "output_tokens": 10,
                               "cost_nanos": 1_500})):
        insert_event(runtime, caller, T1 + timedelta(hours=hours), **fields)


def _by_model(client: Any, world: World) -> dict[str, Any]:
    res = client.get("/v1/usage/summary", query_string={**WINDOW, "group_by": "model"}, headers=world.headers("admin"))
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json  # type: ignore[no-any-return]


def test_a_group_of_unpriced_events_has_a_null_cost_and_failed_calls_cost_nothing(client, world, events) -> None:  # type: ignore[no-untyped-def]
    answer = _by_model(client, world)
    rows = {row["model"]: row for row in answer["rows"]}
    assert (rows["m-free"]["cost_nanos"], rows["m-free"]["cost_usd"], rows["m-free"]["unpriced"]) == (None, None, 2)
    assert (rows["m-broken"]["cost_nanos"], rows["m-broken"]["cost_usd"]) == (0, "0.000000000")
    assert rows["m-gpt"]["cost_nanos"] == 1_500 and answer["totals"]["cost_nanos"] == 1_500  # priced ones summed
    assert answer["totals"]["unpriced"] == 2


def test_cancelled_and_expired_batch_items_are_counted_as_cancelled_not_as_errors(client, world, events) -> None:  # type: ignore[no-untyped-def]
    answer = _by_model(client, world)
    rows = {row["model"]: row for row in answer["rows"]}
    assert (rows["m-gpt"]["errors"], rows["m-gpt"]["cancelled"]) == (0, 2)
    assert (rows["m-broken"]["errors"], rows["m-broken"]["cancelled"]) == (1, 0)
    assert (answer["totals"]["errors"], answer["totals"]["cancelled"]) == (1, 2)
