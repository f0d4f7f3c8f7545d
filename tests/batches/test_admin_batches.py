"""The operator's batch routes (`/admin/batches...`, `/admin/workers`) and `relay admin-batches`: every owner's
batches, including those of a revoked or rotated key, which no inference credential reaches any more."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pika
import pytest

from app.batches import outbox
from app.batches.fleet import fleet_status
from app.runtime import Runtime
from devtools.processes import ROOT, free_port
from devtools.waiting import until
from tests.batches.conftest import module_workers
from tests.batches.helpers import CHAT, get, submit, wait_finished

pytestmark = pytest.mark.integration

ROUTES = [("GET", "/admin/batches/{id}"), ("GET", "/admin/batches/{id}/results"),
          ("POST", "/admin/batches/{id}/cancel")]


def _db_now(runtime: Runtime) -> str:
    with runtime.pool.connection() as conn:
        return conn.execute("SELECT now() AS t").fetchone()["t"].isoformat()  # type: ignore[index]


def _listed(admin, **params: Any) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    res = admin("GET", "/admin/batches", query_string={"limit": 100, **params})
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json["data"]  # type: ignore[no-any-return]


def _submitted(client, secret: str, count: int = 2) -> str:  # type: ignore[no-untyped-def]
    res = submit(client, secret, [CHAT] * count)
    assert res.status_code == 202, res.get_data(as_text=True)
    return str(res.json["id"])


def test_an_operator_reads_and_cancels_the_batches_of_a_revoked_and_a_rotated_key(client, admin, make_key) -> None:
    revoked, rotated = make_key(), make_key()
    batches = {"revoked": _submitted(client, revoked["key"], 3), "rotated": _submitted(client, rotated["key"], 3)}
    assert admin("POST", f"/admin/relay-keys/{revoked['id']}/revoke").status_code == 200
    assert admin("POST", f"/admin/relay-keys/{rotated['id']}/rotate", json={"grace_seconds": 0}).status_code == 200
    assert get(client, revoked["key"], f"/v1/batches/{batches['revoked']}").json["error"]["code"] == "key_revoked"
    for batch_id in batches.values():
        read = admin("GET", f"/admin/batches/{batch_id}", query_string={"state": "queued", "limit": 2})
        assert read.status_code == 200 and read.json["id"] == batch_id
        assert read.json["counts"]["queued"] == 3 and [i["idx"] for i in read.json["items"]] == [0, 1]
        assert read.json["items_next_after"] == 1
        results = admin("GET", f"/admin/batches/{batch_id}/results")
        assert [(r["idx"], r["state"]) for r in json.loads(results.get_data())["results"]] == [
            (0, "queued"), (1, "queued"), (2, "queued")]
        lines = admin("GET", f"/admin/batches/{batch_id}/results", query_string={"format": "jsonl"})
        assert lines.mimetype == "application/x-ndjson" and len(lines.get_data().splitlines()) == 3
        cancelled = admin("POST", f"/admin/batches/{batch_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json["status"] == "cancelled"
        assert cancelled.json["counts"]["cancelled"] == 3 and cancelled.json["finished"] is True


def test_the_operator_list_filters_by_principal_credential_policy_time_and_state(client, admin, runtime, make_key,
                                                                                 make_token) -> None:
    since = _db_now(runtime)
    main, slow, token = make_key("main"), make_key("slow"), make_token("batch-user")
    ids = {"main": _submitted(client, main["key"]), "slow": _submitted(client, slow["key"]),
           "token": _submitted(client, token["token"])}
    names = {v: k for k, v in ids.items()}

    def found(**params: Any) -> list[str]:
        return [names[b["id"]] for b in _listed(admin, **{"from": since, **params}) if b["id"] in names]

    assert found() == ["token", "slow", "main"]  # newest first
    assert found(principal="batch-user") == found(principal="user:batch-user") == ["token"]
    assert found(principal="service_account:batch-svc") == ["slow", "main"]
    assert found(principal="no-such-user") == []
    assert found(credential=main["id"]) == ["main"] and found(credential=token["id"]) == ["token"]
    assert found(policy="slow") == ["slow"]
    policy_id = _listed(admin, credential=slow["id"])[0]["policy_id"]
    assert found(policy=policy_id) == ["slow"]
    assert _listed(admin, to=since, credential=main["id"]) == []
    assert admin("POST", f"/admin/batches/{ids['slow']}/cancel").status_code == 200
    assert found(status="cancelled") == ["slow"] and found(finished="true") == ["slow"]
    assert found(status="queued", finished="false") == ["token", "main"]
    row = _listed(admin, credential=token["id"])[0]
    assert (row["principal"], row["policy"], row["principal_kind"]) == ("batch-user", "main", "user")
    assert "owner" not in row and "relay_key_hash" not in row
    first = admin("GET", "/admin/batches", query_string={"from": since, "limit": 2}).json
    rest = admin("GET", "/admin/batches", query_string={"from": since, "limit": 2, "cursor": first["next_cursor"]})
    assert [names[b["id"]] for b in first["data"] + rest.json["data"]] == ["token", "slow", "main"]
    for batch_id in ids.values():
        admin("POST", f"/admin/batches/{batch_id}/cancel")


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"status": "running"}, {"finished": "maybe"},
                                    {"credential": "not-a-uuid"}, {"from": "yesterday"},
                                    {"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"},
                                    {"principal": "a\x00b"}, {"cursor": "%%%"}, {"colour": "blue"}])
def test_bad_operator_list_arguments_are_a_400_with_a_code(admin, params: dict[str, Any]) -> None:
    res = admin("GET", "/admin/batches", query_string=params)
    assert res.status_code == 400, res.get_data(as_text=True)
    assert res.json["error"]["code"] == "invalid_request"  # as the usage API's cursor (docs/usage.md)


def test_inference_credentials_get_401_and_unknown_ids_404_on_the_operator_routes(client, admin, key,
                                                                                  make_token) -> None:
    batch_id = _submitted(client, key)
    for secret in (key, make_token()["token"], "rk_not-a-key"):
        for method, route in [*ROUTES, ("GET", "/admin/batches"), ("GET", "/admin/workers")]:
            res = client.open(route.format(id=batch_id), method=method, headers={"Authorization": f"Bearer {secret}"})
            assert res.status_code == 401 and res.json["error"]["code"] == "invalid_credential", (method, route)
    for missing in (str(uuid.uuid4()), "not-a-uuid"):
        for method, route in ROUTES:
            res = admin(method, route.format(id=missing))
            assert res.status_code == 404 and res.json["error"]["code"] == "batch_not_found"
    assert admin("POST", f"/admin/batches/{batch_id}/cancel").json["status"] == "cancelled"


def test_the_operator_routes_are_in_the_openapi_document(client) -> None:
    spec = client.get("/openapi.json").json
    routes = {"/admin/batches": "get", "/admin/batches/{batch_id}": "get", "/admin/batches/{batch_id}/results": "get",
              "/admin/batches/{batch_id}/cancel": "post", "/admin/workers": "get"}
    for path, method in routes.items():
        op = spec["paths"][path][method]
        assert op["security"] == [{"adminToken": []}], path
        assert {"200", "400", "401"} <= set(op["responses"]), path
    listing = {p["name"] for p in spec["paths"]["/admin/batches"]["get"]["parameters"]}
    assert {"principal", "credential", "policy", "from", "to", "status", "finished", "limit", "cursor"} <= listing
    assert "404" in spec["paths"]["/admin/batches/{batch_id}"]["get"]["responses"]


def test_fleet_status_counts_the_queue_and_tells_live_workers_from_silent_ones(runtime, settings) -> None:
    queue = f"relay.console-test.{uuid.uuid4().hex[:8]}"
    live, silent = f"console-live-{uuid.uuid4().hex[:6]}", f"console-silent-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.URLParameters(settings.broker_url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()  # each publish returns once the broker has queued it
        channel.queue_declare(queue=queue, durable=False)
        for i in range(3):
            channel.basic_publish(exchange="", routing_key=queue, body=str(i).encode())
        with runtime.pool.connection() as db:
            outbox.heartbeat(db, live, "host-a", 101)
            outbox.heartbeat(db, silent, "host-b", 102)
            db.execute("UPDATE workers SET last_seen = now() - interval '1 hour' WHERE id = %s", (silent,))
        view = Runtime(settings=dataclasses.replace(settings, queue_name=queue), pool=runtime.pool)
        # a depth read gives up after 1 s, which a loaded machine can exceed
        status = until(lambda: fleet_status(view), lambda s: s["queue"]["reachable"] is True,
                       what="a fleet view that reached RabbitMQ", timeout=30, every=0.2)
        workers = {w["id"]: w for w in status["workers"]}
        assert workers[live]["alive"] is True and workers[live]["running"] == 0
        assert workers[silent]["alive"] is False and workers[silent]["seen_ago_s"] >= 3600
        assert status["queue"] == {"name": queue, "reachable": True, "messages": 3, "consumers": 0}
    finally:
        with runtime.pool.connection() as db:
            db.execute("DELETE FROM workers WHERE id IN (%s, %s)", (live, silent))
        conn.channel().queue_delete(queue=queue)
        conn.close()
    closed = dataclasses.replace(settings, broker_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F")
    status = fleet_status(Runtime(settings=closed, pool=runtime.pool))
    assert status["queue"]["reachable"] is False and status["queue"]["messages"] is None


# -- `relay admin-batches` against a real API and real workers ------------------------------------------------

workers = module_workers(processes=1)


def admin_cli(relay_api, token: str | None, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if k != "RELAY_ADMIN_TOKEN"}
    token_args = ["--token", token] if token else []
    return subprocess.run([sys.executable, "-m", "app.cli", "admin-batches", *args, "--url", relay_api.url,
                           *token_args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_the_admin_cli_lists_reads_results_and_cancels_any_batch_and_shows_the_workers(
        relay_api, workers, client, admin, settings, make_key, tmp_path) -> None:
    token = settings.admin_token
    revoked = make_key()
    batch_id = _submitted(client, revoked["key"], 2)
    wait_finished(client, revoked["key"], batch_id)
    assert admin("POST", f"/admin/relay-keys/{revoked['id']}/revoke").status_code == 200
    listed = json.loads(admin_cli(relay_api, token, "list", "--credential", revoked["id"], "--json").stdout)
    assert [b["id"] for b in listed["data"]] == [batch_id] and listed["data"][0]["principal"] == "batch-svc"
    status = json.loads(admin_cli(relay_api, token, "status", batch_id, "--state", "completed", "--json").stdout)
    assert status["counts"]["completed"] == 2 and len(status["items"]) == 2
    out = tmp_path / "results.jsonl"
    assert admin_cli(relay_api, token, "results", batch_id, "-o", str(out)).returncode == 0
    assert [json.loads(line)["state"] for line in out.read_text().splitlines()] == ["completed", "completed"]
    cancelled = admin_cli(relay_api, token, "cancel", batch_id)  # reached (409, not 404): nothing left to cancel
    assert cancelled.returncode == 1 and "batch_finished" in cancelled.stderr
    fleet = json.loads(admin_cli(relay_api, token, "workers", "--json").stdout)
    assert fleet["alive"] >= 1 and fleet["queue"]["reachable"] is True and fleet["queue"]["consumers"] >= 1
    missing = admin_cli(relay_api, None, "workers")
    assert missing.returncode == 1 and "missing_token" in missing.stderr
    refused = admin_cli(relay_api, revoked["key"], "list")
    assert refused.returncode == 1 and "invalid_credential" in refused.stderr
