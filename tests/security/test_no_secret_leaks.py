"""No secret leaks: a representative workload on a real `relay api` and `relay worker` (live calls that succeed,
stream, fail upstream and are refused; a batch run to the end; a batch with a callback_url whose webhooks are
delivered; usage reads and exports; admin reads and credential changes; wrong credentials), then every answer,
every log line of both processes, every webhook sent, every row of every table and every payload file is searched
for every secret: host key values, relay keys (old values included), inference tokens, webhook secrets (catalog and
callback), the admin token and RELAY_SECRET_KEY."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from devtools.stack import MODEL, Stack, item_requests
from devtools.webhook_receiver import Receiver
from tests.security.conftest import HOST_KEYS, WEBHOOK_SECRETS

pytestmark = pytest.mark.integration


class Recorder:
    """Calls the real API and keeps every answer (status line, headers, body) for the scan."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[str, bytes]] = []
        self.session = requests.Session()

    def __call__(self, method: str, path: str, secret: str | None = None, *, reveals: bool = False,
                 header: str = "Authorization", **kwargs: Any) -> requests.Response:
        headers = kwargs.pop("headers", {})
        if secret is not None:
            headers[header] = f"Bearer {secret}" if header == "Authorization" else secret
        res = self.session.request(method, self.url + path, headers=headers, timeout=60, **kwargs)
        if not reveals:  # creating, rotating and minting answer the new secret once, by design
            head = "\n".join(f"{k}: {v}" for k, v in res.headers.items())
            self.answers.append((f"{method} {path} -> {res.status_code}", head.encode() + b"\n" + res.content))
        return res


def _secret_forms(secret: str) -> list[str]:
    """The secret, and its random part on its own (what would be left if only a prefix were stripped)."""
    forms = [secret]
    if secret.startswith("rt_"):
        forms.append(secret.rsplit(".", 1)[1])  # the signature
    elif secret.startswith(("rk_", "sk-")):
        forms.append(secret.rsplit("-", 1)[-1] if secret.startswith("sk-") else secret[3:])
    elif secret.startswith("whsec_"):
        forms.append(secret[6:])  # the key in base64
    return [f for f in forms if len(f) >= 16]


def _database_text(stack: Stack) -> list[tuple[str, str]]:
    """Every row of every table, as JSON text."""
    with stack.runtime.pool.connection() as conn:
        tables = [r["table_name"] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            " AND table_type = 'BASE TABLE'").fetchall()]
        found = []
        for table in tables:
            rows = conn.execute(f'SELECT row_to_json(t)::text AS j FROM "{table}" t').fetchall()
            found += [(f"table {table}", r["j"]) for r in rows]
    assert len(tables) >= 10
    return found


def _files(root: Path) -> list[tuple[str, str]]:
    return [(f"file {p}", p.read_bytes().decode("utf-8", "replace")) for p in root.rglob("*") if p.is_file()]


def test_no_secret_appears_in_any_answer_log_line_table_or_payload_file(
        security_stack: Stack, security_receiver: Receiver, issue: Callable[..., dict[str, Any]]) -> None:
    stack = security_stack
    api = stack.start_api()
    worker = stack.start_worker(threads=4)
    call = Recorder(api.url)
    admin = stack.settings.admin_token
    stack.upstream.control(HOST_KEYS["refused"], mode="invalid")
    stack.upstream.control(HOST_KEYS["spare"], mode="fail", fail_status=400, times=1)

    def create(path: str, body: dict[str, Any]) -> dict[str, Any]:
        res = call("POST", path, admin, reveals=True, json=body)
        assert res.status_code == 201, res.text
        return res.json()  # type: ignore[no-any-return]

    key = create("/admin/relay-keys", {"principal_kind": "service_account", "principal": "svc-a", "policy": "main"})
    refused = create("/admin/relay-keys", {"principal_kind": "service_account", "principal": "svc-b",
                                           "policy": "refused"})
    token = create("/admin/tokens", {"user": "alice", "ttl_seconds": 600})
    rotated = call("POST", f"/admin/relay-keys/{key['id']}/rotate", admin, reveals=True, json={"grace_seconds": 600})
    assert rotated.status_code == 200
    relay_keys = [key["key"], rotated.json()["key"], refused["key"]]
    live_key = rotated.json()["key"]

    # Live calls: success (payload logged), stream, x-api-key, a token, an upstream 400 passed through,
    # an upstream that refuses the host key, wrong and missing credentials.
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
    assert call("POST", "/v1/chat/completions", key["key"], json=chat).status_code == 200
    assert call("POST", "/v1/chat/completions", live_key, json={**chat, "stream": True}).status_code == 200
    assert call("POST", "/v1/chat/completions", live_key, header="x-api-key", json=chat).status_code in (200, 400)
    assert call("POST", "/v1/chat/completions", token["token"], json=chat).status_code in (200, 400)
    assert call("POST", "/v1/responses", live_key, json={"model": MODEL, "input": "x"}).status_code < 500
    assert call("POST", "/v1/chat/completions", refused["key"], json=chat).status_code == 502
    for wrong in (f"rk_{secrets.token_urlsafe(32)}", "rt_x.y", admin, live_key + "x", ""):
        assert call("POST", "/v1/chat/completions", wrong, json=chat).status_code == 401
    for wrong in (f"{admin}x", admin[:-1], live_key, token["token"], ""):
        assert call("GET", "/admin/catalog", wrong).status_code == 401
    assert call("GET", "/v1/usage/events", f"{admin}x").status_code == 401

    # A batch, run to the end by the worker, read back every way.
    res = call("POST", "/v1/batches", live_key, json={"shape": "openai", "requests": item_requests("leak", 5)})
    assert res.status_code == 202
    batch_id = res.json()["id"]
    stack.wait_finished(live_key, batch_id, timeout=60)
    for path in (f"/v1/batches/{batch_id}", f"/v1/batches/{batch_id}/results",
                 f"/v1/batches/{batch_id}/results?format=jsonl", "/v1/batches", "/v1/batches?format=relay"):
        assert call("GET", path, live_key).status_code == 200
    assert call("POST", f"/v1/batches/{batch_id}/cancel", live_key).status_code == 409  # finished: nothing to cancel
    call("POST", "/v1/batches", token["token"], json={"shape": "openai", "requests": item_requests("leak-t", 2)})

    # Webhooks: the project's (signed with both secrets of its rotation) and a batch's callback, delivered.
    res = call("POST", "/v1/batches", live_key, json={
        "shape": "openai", "requests": item_requests("leak-hook", 2), "callback_url": f"{security_receiver.url}/cb",
        "callback_secret": WEBHOOK_SECRETS["callback"]})
    assert res.status_code == 202, res.text
    hooked = res.json()["id"]
    security_receiver.wait("/cb", 1, timeout=60)
    security_receiver.wait("/project", 2, timeout=60)  # the first batch's event and this one's
    deliveries = call("GET", f"/admin/webhooks/deliveries?batch_id={hooked}", admin).json()["data"]
    assert len(deliveries) == 2
    for delivery in deliveries:
        assert call("GET", f"/admin/webhooks/deliveries/{delivery['id']}", admin).status_code == 200
    assert call("GET", "/admin/webhooks/deliveries?limit=200", admin).status_code == 200

    # Usage and admin reads.
    for who in (admin, live_key, token["token"]):
        for path in ("/v1/usage/events?limit=1000", "/v1/usage/summary?group_by=credential,model,batch",
                     "/v1/usage/events/export?format=csv", "/v1/usage/events/export?format=jsonl"):
            assert call("GET", path, who).status_code == 200
    for path in ("/admin/catalog", "/admin/hosts", "/admin/projects", "/admin/relay-keys", "/admin/tokens",
                 "/admin/policies/main", "/admin/users", "/admin/service-accounts", "/metrics", "/readyz",
                 "/openapi.json"):
        assert call("GET", path, admin).status_code == 200, path
    assert call("POST", f"/admin/relay-keys/{refused['id']}/revoke", admin).status_code == 200
    assert call("POST", f"/admin/tokens/{token['id']}/revoke", admin).status_code == 200
    assert call("PUT", "/admin/catalog?dry_run=true", admin, json={"hosts": [{"name": "x"}]}).status_code == 400

    api.stop()
    worker.stop()

    wanted = {**{f"host key {n}": v for n, v in HOST_KEYS.items()},
              **{f"relay key {i}": v for i, v in enumerate(relay_keys)}, "token": token["token"],
              **{f"webhook secret {n}": v for n, v in WEBHOOK_SECRETS.items()},
              "admin token": admin, "RELAY_SECRET_KEY": stack.settings.secret_key}
    haystacks = [(label, body.decode("utf-8", "replace")) for label, body in call.answers]
    haystacks += [(f"log {p.name}", p.read_text(errors="replace")) for p in (api.log_path, worker.log_path)]
    haystacks += [(f"webhook to {r.path}", json.dumps(r.headers) + r.body.decode())
                  for r in security_receiver.received()]
    haystacks += _database_text(stack)
    haystacks += _files(Path(stack.settings.batch_payload_dir))
    assert any("payload_logs" in label for label, _ in haystacks)  # the live bodies were logged: scanned too
    files = [label for label, _ in haystacks if label.startswith("file ")]
    # the request files of this test's three batches (and any other test's on this stack) and the responses of the
    # two it waited for were scanned
    assert sum(f.endswith("/requests.bin") for f in files) >= 3 and sum(f.endswith(".seg") for f in files) >= 2, files
    leaks = [f"{name} in {label}" for name, secret in wanted.items() for form in _secret_forms(secret)
             for label, text in haystacks if form in text]
    assert not leaks, "\n".join(leaks[:20])
    assert stack.upstream.requests(key=HOST_KEYS["main"])  # the host key did go where it belongs: upstream


def test_answers_never_carry_the_relay_key_hash(security_stack: Stack, issue: Callable[..., dict[str, Any]]) -> None:
    key = issue("key", "svc-a")
    batch_id = security_stack.submit(key["secret"], "hash", 1)
    with security_stack.runtime.pool.connection() as conn:
        row = conn.execute("SELECT relay_key_hash FROM batches WHERE id = %s", (batch_id,)).fetchone()
    digest = bytes(row["relay_key_hash"]).hex()
    answers = [security_stack.call(key["secret"], "GET", path) for path in (
        f"/v1/batches/{batch_id}", "/v1/batches?format=relay", f"/v1/batches/{batch_id}/results", "/v1/usage/events",
        "/v1/usage/events/export", "/v1/usage/summary?group_by=credential")]
    answers.append(security_stack.admin("GET", "/admin/relay-keys"))
    assert all(a.status_code == 200 for a in answers)
    for answer in answers:
        text = answer.get_data(as_text=True)
        assert digest not in text and json.dumps(digest) not in text
