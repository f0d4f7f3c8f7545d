"""Who sees which events: admin everything; a relay key its own value's; a token its user's token events."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.usage.conftest import WINDOW, World, insert_event, labels, new_key

pytestmark = pytest.mark.integration
ROUTES = ("/v1/usage/events", "/v1/usage/summary", "/v1/usage/events/export")


def seen(client: Any, world: World, who: str, **params: Any) -> set[str]:
    res = client.get("/v1/usage/events", headers=world.headers(who), query_string={"limit": 1000, **params})
    assert res.status_code == 200, res.json
    return set(labels(world, res.json["events"]))


def test_each_reader_sees_exactly_its_own_events(client, world) -> None:
    assert seen(client, world, "KA") == {"E1", "E2", "E3", "E4", "E10"}
    assert seen(client, world, "KB") == {"E5", "E6"}
    assert seen(client, world, "TA1") == {"E7", "E8"}  # any token of u-ann, not u-ann's relay key
    assert seen(client, world, "TA2") == {"E7", "E8"}
    assert seen(client, world, "TB") == {"E9"}
    assert seen(client, world, "KBEN") == set()


def test_filters_cannot_widen_what_a_caller_sees(client, world) -> None:
    kb = world.callers["KB"]
    assert seen(client, world, "KA", credential=str(kb.credential_id)) == set()
    assert seen(client, world, "KA", principal="sa-bot") == set()
    assert seen(client, world, "TB", principal="u-ann") == set()
    assert seen(client, world, "KA", **WINDOW) == {"E1", "E2", "E3", "E4", "E10"}


def test_the_export_follows_the_same_rules(client, world) -> None:
    res = client.get("/v1/usage/events/export", headers=world.headers("KB"), query_string={"format": "jsonl"})
    assert res.status_code == 200
    assert len(res.get_data(as_text=True).splitlines()) == 2


def test_anyone_else_gets_401_and_no_rows(client, world) -> None:
    bad = [{}, {"Authorization": "Bearer " + "x" * 40}, {"Authorization": "Bearer rk_" + "y" * 43},
           {"Authorization": "Bearer " + world.admin + "x"}, {"Authorization": f"Basic {world.admin}"},
           {"x-api-key": "rk_nope"}]
    for headers in bad:
        for route in ROUTES:
            res = client.get(route, headers=headers, query_string={"group_by": "not-a-group"})
            assert res.status_code == 401, (route, headers)
            assert set(res.json) == {"error"} and res.json["error"]["code"] != "invalid_request"


def test_a_relay_key_sends_as_x_api_key_too(client, world) -> None:
    res = client.get("/v1/usage/events", headers={"x-api-key": world.secrets["KB"]})
    assert res.status_code == 200 and set(labels(world, res.json["events"])) == {"E5", "E6"}


def test_a_rotated_key_sees_only_what_its_current_value_did(client, runtime, settings, world) -> None:
    from app.auth import authenticate
    from tests.usage.conftest import T0, admin_headers

    old_secret = new_key(client, settings, "user", "u-ann", "p-main")
    old = authenticate(runtime, old_secret)
    before = insert_event(runtime, old, T0 - timedelta(days=30))
    rotated = client.post(f"/admin/relay-keys/{old.credential_id}/rotate", headers=admin_headers(settings),
                          json={"grace_seconds": 300})
    assert rotated.status_code == 200, rotated.json
    new = authenticate(runtime, rotated.json["key"])
    assert new.credential_id == old.credential_id and new.relay_key_hash != old.relay_key_hash
    after = insert_event(runtime, new, T0 - timedelta(days=30))

    def ids(secret: str) -> set[int]:
        res = client.get("/v1/usage/events", headers={"Authorization": f"Bearer {secret}"})
        return {e["id"] for e in res.json["events"]}

    assert ids(rotated.json["key"]) == {after}
    assert ids(old_secret) == {before}  # the old value, still in its grace period
    admin = client.get("/v1/usage/events", headers=admin_headers(settings),
                       query_string={"credential": str(old.credential_id)})
    assert {e["id"] for e in admin.json["events"]} == {before, after}
