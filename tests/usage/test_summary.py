"""GET /v1/usage/summary: groupings and buckets against hand-computed sums, exact to the nano-dollar."""

from __future__ import annotations

from typing import Any

import pytest

from tests.usage.conftest import B1, B2, WINDOW, World

pytestmark = pytest.mark.integration
# Worked out from tests/usage/conftest.py dataset(): E1..E10.
TOTALS = {"requests": 10, "errors": 3, "cancelled": 0, "input_tokens": 3470, "output_tokens": 1080,
          "cached_tokens": 500, "cost_nanos": 8_748_067, "unpriced": 1, "cost_usd": "0.008748067"}


def summary(client: Any, world: World, who: str = "admin", **params: Any) -> dict[str, Any]:
    res = client.get("/v1/usage/summary", headers=world.headers(who), query_string={**WINDOW, **params})
    assert res.status_code == 200, res.json
    return res.json  # type: ignore[no-any-return]


def by(rows: list[dict[str, Any]], *keys: str) -> dict[Any, dict[str, Any]]:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def test_without_grouping_one_row_holds_the_totals(client, world) -> None:
    answer = summary(client, world)
    assert answer["totals"] == TOTALS
    assert answer["rows"] == [TOTALS]
    assert (answer["group_by"], answer["bucket"], answer["truncated"]) == ([], None, False)


def test_grouped_by_model_the_rows_add_up_to_the_totals(client, world) -> None:
    answer = summary(client, world, group_by="model")
    rows = by(answer["rows"], "model")
    assert rows["m-gpt"] == {"model": "m-gpt", "requests": 6, "errors": 1, "cancelled": 0, "input_tokens": 3160,
                             "output_tokens": 760, "cached_tokens": 500, "cost_nanos": 3_347_068,
                             "cost_usd": "0.003347068", "unpriced": 1}
    assert rows["m-claude"] == {"model": "m-claude", "requests": 4, "errors": 2, "cancelled": 0, "input_tokens": 310,
                                "output_tokens": 320, "cached_tokens": 0, "cost_nanos": 5_400_999,
                                "cost_usd": "0.005400999", "unpriced": 0}
    assert answer["totals"] == TOTALS
    assert [r["model"] for r in answer["rows"]] == ["m-gpt", "m-claude"]  # most requests first


def test_grouped_by_source_batch_and_day(client, world) -> None:
    sources = by(summary(client, world, group_by="source")["rows"], "source")
    assert (sources["live"]["requests"], sources["live"]["cost_nanos"]) == (7, 3_310_567)
    assert (sources["batch"]["requests"], sources["batch"]["cost_nanos"]) == (3, 5_437_500)
    batches = by(summary(client, world, group_by="batch")["rows"], "batch_id")
    assert {k: v["requests"] for k, v in batches.items()} == {None: 7, str(B1): 2, str(B2): 1}
    assert batches[str(B1)]["errors"] == 1
    days = summary(client, world, bucket="day")
    assert [(r["bucket"], r["requests"], r["cost_nanos"]) for r in days["rows"]] == [
        ("2020-03-01T00:00:00Z", 4, 8_634_568), ("2020-03-02T00:00:00Z", 6, 113_499)]
    hours = summary(client, world, bucket="hour", source="batch")
    assert [(r["bucket"], r["requests"]) for r in hours["rows"]] == [
        ("2020-03-01T03:00:00Z", 2), ("2020-03-02T04:00:00Z", 1)]


def test_grouped_by_attribution_the_names_come_with_the_ids(client, world) -> None:
    ka, kb, tb = world.callers["KA"], world.callers["KB"], world.callers["TB"]
    policies = by(summary(client, world, group_by="policy")["rows"], "policy")
    assert {k: v["requests"] for k, v in policies.items()} == {"p-main": 9, "p-side": 1}
    assert policies["p-main"]["policy_id"] == str(ka.policy_id)
    projects = by(summary(client, world, group_by="project")["rows"], "project")
    assert {k: v["requests"] for k, v in projects.items()} == {"pj-apple": 7, "pj-pear": 3}
    teams = by(summary(client, world, group_by="team")["rows"], "team")
    assert {k: v["requests"] for k, v in teams.items()} == {"tm-red": 7, "tm-blue": 3}
    principals = by(summary(client, world, group_by="principal")["rows"], "principal_kind", "principal")
    assert {k: v["requests"] for k, v in principals.items()} == {
        ("user", "u-ann"): 7, ("service_account", "sa-bot"): 2, ("user", "u-ben"): 1}
    assert principals[("user", "u-ben")]["principal_id"] == str(tb.principal_id)
    credentials = by(summary(client, world, group_by="credential")["rows"], "credential_id")
    assert {k: v["requests"] for k, v in credentials.items()} == {
        str(ka.credential_id): 5, str(kb.credential_id): 2, str(world.callers["TA1"].credential_id): 1,
        str(world.callers["TA2"].credential_id): 1, str(tb.credential_id): 1}
    assert credentials[str(ka.credential_id)]["credential_kind"] == "relay_key"
    assert credentials[str(tb.credential_id)]["credential_kind"] == "inference_token"
    hosts = by(summary(client, world, group_by="host")["rows"], "host")
    assert {k: v["requests"] for k, v in hosts.items()} == {"h-openai": 6, "h-anthropic": 3, None: 1}


def test_several_groups_and_a_bucket_combine(client, world) -> None:
    answer = summary(client, world, group_by="source,model", bucket="day")
    rows = by(answer["rows"], "bucket", "source", "model")
    assert rows[("2020-03-01T00:00:00Z", "batch", "m-claude")]["cost_nanos"] == 5_400_000
    assert rows[("2020-03-02T00:00:00Z", "live", "m-gpt")]["requests"] == 3  # E5, E7, E10
    assert sum(r["cost_nanos"] for r in answer["rows"]) == TOTALS["cost_nanos"]
    assert answer["totals"] == TOTALS and answer["group_by"] == ["source", "model"]


def test_filters_apply_to_the_summary(client, world) -> None:
    answer = summary(client, world, group_by="model", source="batch", team="tm-red")
    assert answer["totals"]["requests"] == 3 and answer["totals"]["cost_nanos"] == 5_437_500
    assert summary(client, world, status="4xx")["totals"]["errors"] == 2
    empty = summary(client, world, group_by="model", project="no-such-project")
    assert empty["rows"] == [] and empty["totals"]["requests"] == 0 and empty["totals"]["cost_usd"] == "0.000000000"


def test_a_callers_summary_covers_only_its_own_events(client, world) -> None:
    assert summary(client, world, "KA")["totals"]["requests"] == 5
    assert summary(client, world, "KA")["totals"]["cost_nanos"] == 8_634_568
    assert summary(client, world, "TA1", group_by="credential")["totals"]["requests"] == 2  # E7 + E8
    assert summary(client, world, "KBEN")["totals"]["requests"] == 0
