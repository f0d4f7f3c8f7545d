"""A catalog, real relay keys and tokens (through the admin API), and ten usage events with known numbers.

The events sit in a fixed past window (WINDOW) so admin queries can isolate them from other tests' rows.
Expected numbers in the tests are worked out by hand from the table in `dataset()`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.auth import authenticate
from app.auth_model import Caller
from app.usage.events import UsageEvent
from app.usage.writer import UsageRecord, commit_records
from tests.databases import database_fixtures

# A database and vhost of this folder's own: its catalog replaces no other folder's (tests/databases.py).
services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("usage")

T0 = datetime(2020, 3, 1, tzinfo=UTC)
WINDOW = {"from": "2020-03-01T00:00:00Z", "to": "2020-03-03T00:00:00Z"}
B1 = uuid.UUID("00000000-0000-4000-8000-0000000000b1")
B2 = uuid.UUID("00000000-0000-4000-8000-0000000000b2")

CATALOG: dict[str, Any] = {
    "hosts": [
        {"name": "h-openai", "base_url": "http://127.0.0.1:9", "keys": [{"name": "hk-openai-1", "value": "sk-u-1x"}]},
        {"name": "h-anthropic", "base_url": "http://127.0.0.1:9",
         "keys": [{"name": "hk-anthropic-1", "value": "sk-u-2x"}]},
    ],
    "models": [
        {"name": "m-gpt", "bindings": [{"host": "h-openai", "adapter": "openai", "upstream_model": "gpt-x",
                                        "pricing": {"input_per_mtok": 1, "output_per_mtok": 2}}]},
        {"name": "m-claude", "bindings": [{"host": "h-anthropic", "adapter": "anthropic", "upstream_model": "c-x",
                                           "pricing": {"input_per_mtok": 3, "output_per_mtok": 15}}]},
    ],
    "policies": [
        {"name": "p-main", "models": ["*"], "key_pool": ["hk-openai-1", "hk-anthropic-1"]},
        {"name": "p-side", "models": ["*"], "key_pool": ["hk-anthropic-1"]},
    ],
    "teams": [{"name": "tm-red"}, {"name": "tm-blue"}],
    "projects": [{"name": "pj-apple", "team": "tm-red"}, {"name": "pj-pear", "team": "tm-blue"}],
    "users": [{"name": "u-ann", "policy": "p-main", "project": "pj-apple", "team": "tm-red"},
              {"name": "u-ben", "policy": "p-side", "project": "pj-pear", "team": "tm-blue"}],
    "service_accounts": [{"name": "sa-bot", "policy": "p-main", "project": "pj-pear", "team": "tm-blue"}],
}


@dataclass
class World:
    """The readers (admin token, keys, tokens) and the events' ids by label (E1..E10)."""

    admin: str
    secrets: dict[str, str]  # KA, KB, KBEN (no events), TA1, TA2, TB
    callers: dict[str, Caller]
    ids: dict[str, int]
    host_ids: dict[str, uuid.UUID]

    def headers(self, who: str) -> dict[str, str]:
        secret = self.admin if who == "admin" else self.secrets[who]
        return {"Authorization": f"Bearer {secret}"}


def admin_headers(settings: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.admin_token}"}


def new_key(client: Any, settings: Any, kind: str, principal: str, policy: str) -> str:
    res = client.post("/admin/relay-keys", headers=admin_headers(settings),
                      json={"principal_kind": kind, "principal": principal, "policy": policy})
    assert res.status_code == 201, res.json
    return str(res.json["key"])


def new_token(client: Any, settings: Any, user: str) -> str:
    res = client.post("/admin/tokens", headers=admin_headers(settings), json={"user": user, "ttl_seconds": 3600})
    assert res.status_code == 201, res.json
    return str(res.json["token"])


def insert_event(runtime: Any, caller: Caller, at: datetime, **fields: Any) -> int:
    """Record one event with the usage writer, then move its created_at to AT (the insert stamps now())."""
    request_id = "t-" + uuid.uuid4().hex
    fields.setdefault("source", "live")
    fields.setdefault("status", 200)
    event = UsageEvent.for_caller(caller, request_id=request_id, policy_id=caller.policy_id, **fields)
    # A batch item's event is found by its batch and index (its request id is not stored).
    where, key = (("batch_id = %s AND batch_idx = %s", (event.batch_id, event.batch_idx)) if event.batch_id
                  else ("request_id = %s", (request_id,)))
    with runtime.pool.connection() as conn:
        commit_records(conn, [UsageRecord(event)])
        row = conn.execute(f"UPDATE usage_events SET created_at = %s WHERE {where} RETURNING id",
                           (at, *key)).fetchone()
    return int(row["id"])


def dataset(world: World) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(label, caller, hours after T0, fields): the ten events every test's expectations are computed from."""
    gpt = {"model_requested": "m-gpt", "host_name": "h-openai", "host_id": world.host_ids["h-openai"]}
    claude = {"model_requested": "m-claude", "host_name": "h-anthropic", "host_id": world.host_ids["h-anthropic"]}
    return [
        ("E1", "KA", 1, {**gpt, "input_tokens": 1000, "output_tokens": 500, "cost_nanos": 1_234_567}),
        ("E2", "KA", 2, {**gpt, "input_tokens": 2000, "output_tokens": 100, "cached_tokens": 500,
                         "cost_nanos": 2_000_001}),
        ("E3", "KA", 3, {**claude, "source": "batch", "batch_id": B1, "batch_idx": 0, "input_tokens": 300,
                         "output_tokens": 300, "cost_nanos": 5_400_000}),
        ("E4", "KA", 3, {**claude, "source": "batch", "batch_id": B1, "batch_idx": 1, "status": 502,
                         "upstream_status": 502, "error_code": "upstream_error"}),
        ("E5", "KB", 25, {**gpt, "status": 429, "error_code": "rate_limited"}),
        ("E6", "KB", 26, {**claude, "input_tokens": 10, "output_tokens": 20, "cost_nanos": 999}),
        ("E7", "TA1", 27, {**gpt, "input_tokens": 100, "output_tokens": 100, "cost_nanos": 75_000}),
        ("E8", "TA2", 28, {**gpt, "source": "batch", "batch_id": B2, "batch_idx": 0, "input_tokens": 50,
                           "output_tokens": 50, "cost_nanos": 37_500}),
        ("E9", "TB", 29, {"model_requested": "m-claude", "status": 404, "error_code": "model_not_found"}),
        ("E10", "KA", 30, {**gpt, "input_tokens": 10, "output_tokens": 10}),  # priced nowhere: unpriced
    ]


@pytest.fixture(scope="session")
def world(app: Any, runtime: Any, settings: Any) -> World:
    client = app.test_client()
    res = client.put("/admin/catalog", headers=admin_headers(settings), json=CATALOG)
    assert res.status_code == 200, res.json
    secrets = {
        "KA": new_key(client, settings, "user", "u-ann", "p-main"),
        "KB": new_key(client, settings, "service_account", "sa-bot", "p-main"),
        "KBEN": new_key(client, settings, "user", "u-ben", "p-side"),
        "TA1": new_token(client, settings, "u-ann"),
        "TA2": new_token(client, settings, "u-ann"),
        "TB": new_token(client, settings, "u-ben"),
    }
    callers = {name: authenticate(runtime, secret) for name, secret in secrets.items()}
    with runtime.pool.connection() as conn:
        host_ids = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM hosts").fetchall()}
    w = World(admin=settings.admin_token, secrets=secrets, callers=callers, ids={}, host_ids=host_ids)
    for label, who, hours, fields in dataset(w):
        w.ids[label] = insert_event(runtime, callers[who], T0 + timedelta(hours=hours), **fields)
    return w


def labels(world: World, events: list[dict[str, Any]]) -> list[str]:
    """The dataset labels of EVENTS, in the order given (events from outside the dataset are kept as ids)."""
    by_id = {v: k for k, v in world.ids.items()}
    return [by_id.get(e["id"], str(e["id"])) for e in events]
