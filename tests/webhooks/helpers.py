"""Helpers for webhook tests: the settings and catalog, secrets, batches created through each API, and reading what
the receiver got."""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any
from uuid import UUID

from devtools.stack import Stack
from devtools.webhook_receiver import Received, Receiver
from tests.batches.provider_helpers import chat, jsonl, message

# Fast retries, short timeouts, and the receiver's loopback address allowed (for callbacks and for every delivery).
HOOK_SETTINGS = {"webhook_allowed_hosts": "127.0.0.1,localhost", "webhook_allowed_networks": "127.0.0.0/8",
                 "webhook_timeout_s": 2.0, "webhook_retry_min_s": 0.2, "webhook_retry_max_s": 1.0,
                 "webhook_give_up_after_s": 60.0}
MODEL, CLAUDE = "gpt-4o-mini", "claude-sonnet"
SLOW_KEY = "sk-hooks-slow"


def new_secret() -> str:
    """A Standard Webhooks secret: whsec_ and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


PROJECT_SECRET, TEAM_SECRET, OLD_SECRET, CALLBACK_SECRET = (new_secret() for _ in range(4))


def hooks_catalog(upstream_url: str, receiver_url: str, *, project: list[dict[str, Any]] | None = None,
                  team: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An openai and an anthropic host on the fake upstream; policies `hooks` and `slow` (a key the tests slow
    down); one service account in project p-hooks of team t-hooks. By default the project has one webhook (all
    events, PROJECT_SECRET) at RECEIVER_URL/project and the team none."""
    breaker = {"failures": 10000, "cooldown": "1s"}
    return {
        "hosts": [{"name": "openai", "base_url": upstream_url, "keys": [{"name": "k-hooks", "value": "sk-hooks"},
                                                                        {"name": "k-slow", "value": SLOW_KEY}]},
                  {"name": "anthropic", "base_url": upstream_url, "keys": [{"name": "k-an", "value": "sk-hooks-an"}]}],
        "models": [{"name": MODEL, "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": MODEL}]},
                   {"name": CLAUDE, "bindings": [{"host": "anthropic", "adapter": "anthropic",
                                                  "upstream_model": "claude-sonnet-4-5"}]}],
        "policies": [{"name": "hooks", "models": ["*"], "key_pool": ["k-hooks", "k-an"], "circuit_breaker": breaker},
                     {"name": "slow", "models": ["*"], "key_pool": ["k-slow"], "circuit_breaker": breaker}],
        "teams": [{"name": "t-hooks", "webhooks": team or []}],
        "projects": [{"name": "p-hooks", "team": "t-hooks", "webhooks": [
            {"url": f"{receiver_url}/project", "secret": PROJECT_SECRET}] if project is None else project}],
        "service_accounts": [{"name": "faults-svc", "policy": "hooks", "project": "p-hooks", "team": "t-hooks"}],
    }


def submit(stack: Stack, key: str, count: int = 2, **extra: Any) -> str:
    """A Relay batch of COUNT chat items (EXTRA: more envelope members, e.g. callback_url); its id."""
    res = stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": [chat(f"hook {i}")
                                                                                      for i in range(count)], **extra})
    assert res.status_code == 202, res.get_data(as_text=True)
    return str(res.json["id"])


def submit_anthropic(stack: Stack, key: str, count: int = 2) -> str:
    """A batch created through Anthropic's Message Batches API; its msgbatch_ id."""
    res = stack.call(key, "POST", "/v1/messages/batches", json={"requests": [
        {"custom_id": f"m-{i}", "params": message(f"hook {i}", CLAUDE)} for i in range(count)]})
    assert res.status_code == 200, res.get_data(as_text=True)
    return str(res.json["id"])


def create_openai(client: Any, count: int = 2, **extra: Any) -> Any:
    """A batch created with the official SDK from an uploaded file; the SDK's Batch."""
    rows = [{"custom_id": f"c-{i}", **chat(f"openai hook {i}")} for i in range(count)]
    upload = client.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
    return client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                                 extra_body=extra or None)


def events(received: list[Received]) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in received]


def for_batch(receiver: Receiver, path: str, batch_id: str, count: int = 1, timeout: float = 30) -> list[Received]:
    """The POSTs under PATH about BATCH_ID (its id as the event names it), at least COUNT of them."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in receiver.received(path) if json.loads(r.body)["data"]["id"] == batch_id]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} webhook(s) for {batch_id} under {path} after {timeout}s")
        time.sleep(0.05)


def deliveries(stack: Stack, batch_id: str) -> list[dict[str, Any]]:
    """The admin route's deliveries of a batch's event."""
    res = stack.admin("GET", "/admin/webhooks/deliveries", query_string={"batch_id": batch_id})
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json["data"]  # type: ignore[no-any-return]


def wait_delivery(stack: Stack, batch_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """The batch's one delivery once it is in STATE, with its attempts (the admin detail)."""
    deadline = time.monotonic() + timeout
    while True:
        found = deliveries(stack, batch_id)
        if found and found[0]["state"] == state:
            res = stack.admin("GET", f"/admin/webhooks/deliveries/{found[0]['id']}")
            assert res.status_code == 200
            return res.json  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"the delivery of {batch_id} is not {state} after {timeout}s: {found}")
        time.sleep(0.1)


def batch_uuid(text: str) -> UUID:
    return UUID(hex=text.rsplit("_", 1)[1]) if "_" in text else UUID(text)
