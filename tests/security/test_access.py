"""Who may read what: the access matrix of every batch route and usage route for every kind of credential, and
the wall between inference credentials and the admin API."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from devtools.stack import Stack, item_requests
from tests.fuzz.test_bad_input import SHAPED_ROUTES

pytestmark = pytest.mark.integration

BATCH_ROUTES = [("GET", "/v1/batches/{id}"), ("GET", "/v1/batches/{id}/results"), ("POST", "/v1/batches/{id}/cancel")]
USAGE_ROUTES = ["/v1/usage/events", "/v1/usage/summary", "/v1/usage/events/export"]


@dataclass
class World:
    """Credentials by name (secrets) and the batches each submitted, after rotations and a revocation."""

    stack: Stack
    secrets: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)  # credential name -> its key or token id
    batches: dict[str, str] = field(default_factory=dict)  # batch name -> id

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        secret = self.stack.settings.admin_token if who == "admin" else self.secrets[who]
        return self.stack.call(secret, method, path, **kwargs)


@pytest.fixture(scope="module")
def world(security_stack: Stack, issue: Callable[..., dict[str, Any]]) -> World:
    w = World(security_stack)
    for name, kind, principal in [("A", "key", "svc-a"), ("A2", "key", "svc-a"), ("B", "key", "svc-b"),
                                  ("R", "key", "svc-a"), ("R0", "key", "svc-a"), ("V", "key", "svc-a"),
                                  ("TA1", "token", "alice"), ("TA2", "token", "alice"), ("TB", "token", "bob")]:
        record = issue(kind, principal)
        w.secrets[name], w.ids[name] = record["secret"], str(record["id"])
    for batch, who in [("bA", "A"), ("bR", "R"), ("bR0", "R0"), ("bV", "V"), ("bT", "TA1")]:
        w.batches[batch] = security_stack.submit(w.secrets[who], f"access-{batch}", 2)
        assert w.call(who, "POST", f"/v1/batches/{w.batches[batch]}/cancel").status_code == 200  # usage events
    for name, grace in (("R", 3600), ("R0", 0)):
        res = security_stack.admin("POST", f"/admin/relay-keys/{w.ids[name]}/rotate", json={"grace_seconds": grace})
        assert res.status_code == 200, res.get_data(as_text=True)
        w.secrets[f"{name}_old"], w.secrets[f"{name}_new"] = w.secrets.pop(name), res.json["key"]
        w.ids[f"{name}_old"] = w.ids[f"{name}_new"] = w.ids.pop(name)
    assert security_stack.admin("POST", f"/admin/relay-keys/{w.ids['V']}/revoke").status_code == 200
    deadline = time.monotonic() + 10  # every replica (here: this one) sees credential changes within a second
    while w.call("V", "GET", "/v1/batches").status_code != 401:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return w


# (credential, batch, answer) — access follows the relay key *value*, or the user for inference tokens.
BATCH_ACCESS = [
    ("A", "bA", 200), ("A2", "bA", 404), ("B", "bA", 404), ("TA1", "bA", 404), ("TB", "bA", 404),
    ("R_old", "bR", 200), ("R_new", "bR", 404), ("A", "bR", 404),
    ("R0_new", "bR0", 404), ("A", "bR0", 404),
    ("TA1", "bT", 200), ("TA2", "bT", 200), ("TB", "bT", 404), ("A", "bT", 404),
]
REFUSED = [("R0_old", "key_rotated_out"), ("V", "key_revoked"), ("admin", "invalid_credential")]
# The batches (and so the usage events) each credential sees, among this module's.
VISIBLE = {"A": {"bA"}, "A2": set(), "B": set(), "R_old": {"bR"}, "R_new": set(), "R0_new": set(),
           "TA1": {"bT"}, "TA2": {"bT"}, "TB": set()}


@pytest.mark.parametrize(("who", "batch", "status"), BATCH_ACCESS, ids=[f"{w}-on-{b}" for w, b, _ in BATCH_ACCESS])
def test_only_the_submitting_key_value_or_user_reads_or_cancels_a_batch(world: World, who: str, batch: str,
                                                                         status: int) -> None:
    batch_id = world.batches[batch]
    for method, route in BATCH_ROUTES:
        res = world.call(who, method, route.format(id=batch_id))
        assert res.status_code == status, (method, route, res.get_data(as_text=True)[:300])
        if status == 404:
            error = res.json["error"]  # OpenAI's error object, which holds Relay's code and message
            assert (error["code"], error["message"], error["type"]) == ("batch_not_found", "batch not found",
                                                                        "invalid_request_error")
        elif route.endswith("results"):
            assert [r["state"] for r in json.loads(res.get_data())["results"]] == ["cancelled", "cancelled"]
        else:
            assert res.json["id"] == batch_id


@pytest.mark.parametrize(("who", "code"), REFUSED, ids=[w for w, _ in REFUSED])
def test_rotated_out_revoked_and_admin_credentials_are_401_on_every_batch_route(world: World, who: str,
                                                                               code: str) -> None:
    routes = [*BATCH_ROUTES, ("DELETE", "/v1/batches/{id}"), ("GET", "/v1/batches"), ("POST", "/v1/batches")]
    for method, route in routes:
        for batch_id in world.batches.values():
            res = world.call(who, method, route.format(id=batch_id), json={"shape": "openai", "requests": [{}]})
            assert res.status_code == 401 and res.json["error"]["code"] == code, (method, route, res.json)


@pytest.mark.parametrize("who", sorted(VISIBLE))
def test_a_batch_list_shows_exactly_the_callers_own_batches(world: World, who: str) -> None:
    res = world.call(who, "GET", "/v1/batches", query_string={"format": "relay", "limit": 100})
    assert res.status_code == 200
    listed = {b["id"] for b in res.json["data"]}
    mine = {name for name, batch_id in world.batches.items() if batch_id in listed}
    assert mine == VISIBLE[who]


def _usage_batches(world: World, who: str, route: str, **params: Any) -> set[str]:
    """The batches (by name) whose usage events WHO reads through ROUTE."""
    res = world.call(who, "GET", route, query_string=params)
    assert res.status_code == 200, res.get_data(as_text=True)[:300]
    if route.endswith("/export"):
        ids = {json.loads(line)["batch_id"] for line in res.get_data(as_text=True).splitlines() if line}
    elif route.endswith("/summary"):
        ids = {row["batch_id"] for row in res.json["rows"]} if params.get("group_by") else set()
    else:
        ids = {event["batch_id"] for event in res.json["events"]}
    return {name for name, batch_id in world.batches.items() if batch_id in ids}


@pytest.mark.parametrize("who", sorted(VISIBLE))
def test_usage_routes_show_a_caller_only_its_own_events(world: World, who: str) -> None:
    for route in USAGE_ROUTES:
        params: dict[str, Any] = {"group_by": "batch"} if route.endswith("/summary") else {}
        assert _usage_batches(world, who, route, **params) == VISIBLE[who], route
    for batch_id in world.batches.values():  # asking for someone else's events by name gets nothing
        found = _usage_batches(world, who, "/v1/usage/events", batch_id=batch_id)
        assert found <= VISIBLE[who]
    for other in ("A", "A2", "TA1", "TB"):
        found = _usage_batches(world, who, "/v1/usage/events", credential=world.ids[other])
        assert found <= VISIBLE[who]


def test_the_admin_token_sees_every_usage_event(world: World) -> None:
    for route in USAGE_ROUTES:
        params: dict[str, Any] = {"group_by": "batch"} if route.endswith("/summary") else {"limit": 1000}
        if route.endswith("/export"):
            params = {}
        assert _usage_batches(world, "admin", route, **params) == set(world.batches)


@pytest.mark.parametrize(("who", "code"), REFUSED[:2], ids=[w for w, _ in REFUSED[:2]])
def test_rotated_out_and_revoked_keys_are_401_on_every_usage_route(world: World, who: str, code: str) -> None:
    for route in USAGE_ROUTES:
        res = world.call(who, "GET", route)
        assert res.status_code == 401 and res.json["error"]["code"] == code


def test_the_admin_token_is_not_an_inference_credential(world: World) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "input": "hi",
            "max_tokens": 5}
    for path in SHAPED_ROUTES:
        res = world.call("admin", "POST", path, json=body)
        assert res.status_code == 401, path
        assert res.json["error"]["code"] == "invalid_credential", path
    for prefix in ("/v1", "/openai/v1", "/anthropic/v1"):
        assert world.call("admin", "GET", f"{prefix}/models").status_code == 401
    res = world.call("admin", "POST", "/v1/batches", json={"shape": "openai", "requests": item_requests("x", 1)})
    assert res.status_code == 401


def _admin_requests(stack: Stack) -> list[tuple[str, str]]:
    """(method, path) of every admin route, with ids and names filled in."""
    found = []
    for rule in stack.app.url_map.iter_rules():
        if not rule.rule.startswith("/admin"):
            continue
        path = rule.rule.replace("<uuid:key_id>", str(uuid.uuid4())).replace("<uuid:token_id>", str(uuid.uuid4()))
        path = path.replace("<string:name>", "main").replace("<batch_id>", str(uuid.uuid4())).replace("<idx>", "0")
        path = path.replace("<delivery_id>", str(uuid.uuid4()))
        assert "<" not in path, rule.rule
        found += [(method, path) for method in sorted(rule.methods or ()) if method not in ("HEAD", "OPTIONS")]
    return found


@pytest.mark.parametrize("who", ["A", "A2", "R_old", "TA1", "TB"])
def test_inference_credentials_are_401_on_every_admin_route(world: World, who: str) -> None:
    requests = _admin_requests(world.stack)
    assert len(requests) >= 20
    for method, path in requests:
        res = world.call(who, method, path, json={})
        assert res.status_code == 401, (method, path, res.get_data(as_text=True)[:200])
        assert res.json["error"]["code"] in ("invalid_credential", "missing_credential")
    catalog = world.stack.admin("GET", "/admin/policies/main")
    assert catalog.status_code == 200 and catalog.json["enabled"] is True  # nothing above changed anything
