"""GET /v1/usage/events: filters against the hand-made dataset, newest-first order and cursor pages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.usage.conftest import B1, WINDOW, World, labels

pytestmark = pytest.mark.integration


def events(client: Any, world: World, who: str = "admin", **params: Any) -> list[dict[str, Any]]:
    res = client.get("/v1/usage/events", headers=world.headers(who), query_string={**WINDOW, "limit": 1000, **params})
    assert res.status_code == 200, res.json
    assert res.json["next_cursor"] is None
    return res.json["events"]  # type: ignore[no-any-return]


def found(client: Any, world: World, **params: Any) -> set[str]:
    return set(labels(world, events(client, world, **params)))


def test_the_admin_sees_every_event_newest_first(client, world) -> None:
    listed = labels(world, events(client, world))
    assert listed == ["E10", "E9", "E8", "E7", "E6", "E5", "E4", "E3", "E2", "E1"]


def test_each_filter_selects_exactly_the_matching_events(client, world) -> None:
    ka = world.callers["KA"]
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"source": "batch"}, {"E3", "E4", "E8"}),
        ({"source": "live"}, {"E1", "E2", "E5", "E6", "E7", "E9", "E10"}),
        ({"from": "2020-03-02T00:00:00Z"}, {"E5", "E6", "E7", "E8", "E9", "E10"}),
        ({"to": "2020-03-01T03:00:00+00:00"}, {"E1", "E2"}),
        ({"model": "m-claude"}, {"E3", "E4", "E6", "E9"}),
        ({"host": "h-anthropic"}, {"E3", "E4", "E6"}),
        ({"host": str(world.host_ids["h-openai"])}, {"E1", "E2", "E5", "E7", "E8", "E10"}),
        ({"policy": "p-side"}, {"E9"}),
        ({"policy": str(ka.policy_id)}, {"E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E10"}),
        ({"project": "pj-pear"}, {"E5", "E6", "E9"}),
        ({"team": "tm-red"}, {"E1", "E2", "E3", "E4", "E7", "E8", "E10"}),
        ({"team": str(ka.team_id)}, {"E1", "E2", "E3", "E4", "E7", "E8", "E10"}),
        ({"principal": "u-ann"}, {"E1", "E2", "E3", "E4", "E7", "E8", "E10"}),
        ({"principal": "service_account:sa-bot"}, {"E5", "E6"}),
        ({"principal": f"user:{world.callers['TB'].principal_id}"}, {"E9"}),
        ({"principal": "user:sa-bot"}, set()),
        ({"credential": str(ka.credential_id)}, {"E1", "E2", "E3", "E4", "E10"}),
        ({"batch_id": str(B1)}, {"E3", "E4"}),
        ({"status": "2xx"}, {"E1", "E2", "E3", "E6", "E7", "E8", "E10"}),
        ({"status": "4xx"}, {"E5", "E9"}),
        ({"status": "5xx"}, {"E4"}),
        ({"error_code": "rate_limited"}, {"E5"}),
        ({"project": "no-such-project"}, set()),
        ({"source": "batch", "model": "m-gpt", "team": "tm-red"}, {"E8"}),
    ]
    for params, expected in cases:
        assert found(client, world, **params) == expected, params


def test_an_event_is_plain_json_without_the_key_hash(client, world) -> None:
    [e3] = [e for e in events(client, world, batch_id=str(B1)) if e["id"] == world.ids["E3"]]
    ka = world.callers["KA"]
    assert e3["source"] == "batch" and e3["batch_id"] == str(B1) and e3["batch_idx"] == 0
    assert e3["cost_nanos"] == 5_400_000 and e3["cost_usd"] == "0.005400000"
    assert e3["credential_kind"] == "relay_key" and e3["credential_id"] == str(ka.credential_id)
    assert (e3["principal"], e3["policy"], e3["project"], e3["team"]) == ("u-ann", "p-main", "pj-apple", "tm-red")
    assert e3["created_at"] == "2020-03-01T03:00:00Z"
    assert "relay_key_hash" not in e3
    assert ka.relay_key_hash is not None and e3["relay_key_hash_prefix"] == ka.relay_key_hash[:4].hex()
    assert ka.relay_key_hash.hex() not in str(events(client, world))
    [e10] = [e for e in events(client, world, credential=str(ka.credential_id)) if e["id"] == world.ids["E10"]]
    assert e10["cost_nanos"] is None and e10["cost_usd"] is None


def test_cursor_pages_cover_every_event_once_in_order(client, world) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {**WINDOW, "limit": 3, **({"cursor": cursor} if cursor else {})}
        res = client.get("/v1/usage/events", headers=world.headers("admin"), query_string=params)
        assert res.status_code == 200, res.json
        seen += labels(world, res.json["events"])
        pages += 1
        cursor = res.json["next_cursor"]
        if cursor is None:
            break
    assert pages == 4
    assert seen == ["E10", "E9", "E8", "E7", "E6", "E5", "E4", "E3", "E2", "E1"]


def test_a_page_boundary_between_events_with_the_same_time_keeps_both(client, world) -> None:
    # E3 and E4 share created_at; the cursor's id tiebreak must not drop either.
    first = client.get("/v1/usage/events", headers=world.headers("admin"),
                       query_string={**WINDOW, "batch_id": str(B1), "limit": 1})
    second = client.get("/v1/usage/events", headers=world.headers("admin"),
                        query_string={**WINDOW, "batch_id": str(B1), "limit": 1, "cursor": first.json["next_cursor"]})
    assert labels(world, first.json["events"]) + labels(world, second.json["events"]) == ["E4", "E3"]
    assert second.json["next_cursor"] is None
