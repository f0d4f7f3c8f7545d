"""A relay key whose policy is deleted says so, and finds its policy again when one of that name is re-applied."""

from __future__ import annotations

import json

import pytest

from app.auth import authenticate, get_policy
from app.catalog.apply import apply_catalog
from app.catalog.service import delete_policy, set_policy_enabled
from app.credentials import keys
from tests.catalog.helpers import base_catalog

pytestmark = pytest.mark.integration


def with_policy(name: str) -> dict:  # type: ignore[type-arg]
    doc = base_catalog()
    doc["policies"].append({"name": name, "models": ["claude-*"]})
    return doc


def state_of(runtime, key_id) -> str:  # type: ignore[no-untyped-def]
    return keys.key_fields(keys.get_key(runtime, key_id))["state"]


def live_call(client, secret: str):  # type: ignore[no-untyped-def]
    """A call the policy does not grant: it answers before any upstream, naming what stopped it."""
    return client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {secret}"},
                       json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})


def test_a_key_finds_its_policy_again_when_a_policy_of_that_name_is_reapplied(runtime, client) -> None:
    apply_catalog(runtime, with_policy("t-phoenix"))
    issued = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-phoenix")
    key_id = issued.view.key.id
    assert live_call(client, issued.secret).get_json()["error"]["code"] == "model_not_allowed"

    apply_catalog(runtime, base_catalog())  # a catalog without it: the policy is soft-deleted
    assert state_of(runtime, key_id) == "policy_deleted"
    answer = live_call(client, issued.secret)
    assert (answer.status_code, answer.get_json()["error"]["code"]) == (403, "policy_deleted")

    result = apply_catalog(runtime, with_policy("t-phoenix"))
    assert result.changes["policies"]["created"] == ["t-phoenix"]
    assert result.changes["relay_keys"]["updated"] == [str(key_id)]
    assert state_of(runtime, key_id) == "active"
    policy = get_policy(runtime, authenticate(runtime, issued.secret).policy_id)
    assert policy is not None and policy.name == "t-phoenix" and not policy.deleted
    assert live_call(client, issued.secret).get_json()["error"]["code"] == "model_not_allowed"
    apply_catalog(runtime, base_catalog())


def test_a_policy_deleted_through_the_admin_route_is_found_again_too(runtime) -> None:
    apply_catalog(runtime, with_policy("t-lazarus"))
    issued = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-lazarus")
    delete_policy(runtime, "t-lazarus")
    assert state_of(runtime, issued.view.key.id) == "policy_deleted"
    apply_catalog(runtime, with_policy("t-lazarus"))
    assert state_of(runtime, issued.view.key.id) == "active"
    apply_catalog(runtime, base_catalog())


def test_keys_of_a_disabled_policy_list_as_policy_disabled_and_their_own_state_comes_first(relay, runtime) -> None:
    apply_catalog(runtime, with_policy("t-paused"))
    issued = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-paused")
    revoked = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-paused")
    keys.change_key_state(runtime, revoked.view.key.id, "revoke")
    set_policy_enabled(runtime, "t-paused", False)
    code, out, _ = relay("keys", "list")
    states = {k["id"]: k["state"] for k in json.loads(out)}
    assert code == 0 and states[str(issued.view.key.id)] == "policy_disabled"
    assert states[str(revoked.view.key.id)] == "revoked"
    set_policy_enabled(runtime, "t-paused", True)
    assert state_of(runtime, issued.view.key.id) == "active"
    apply_catalog(runtime, base_catalog())


def test_the_admin_listing_shows_a_deleted_policys_keys_as_policy_deleted(runtime, client, settings) -> None:
    apply_catalog(runtime, with_policy("t-gone"))
    issued = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-gone")
    apply_catalog(runtime, base_catalog())
    listed = client.get("/admin/relay-keys", headers={"Authorization": f"Bearer {settings.admin_token}"}).get_json()
    assert {k["id"]: k["state"] for k in listed}[str(issued.view.key.id)] == "policy_deleted"
