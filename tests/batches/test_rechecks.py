"""The credential and the policy are checked again when each item runs: batches are submitted with no worker
running, the credential or policy changes, then the workers start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devtools.processes import start_workers
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, submit, usage_events, wait_finished

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

SCENARIOS = ("key_disabled", "key_revoked", "key_expired", "key_rotated_out", "token_expired", "token_revoked",
             "policy_disabled", "policy_deleted", "control")


@pytest.fixture(scope="module")
def batches(app, admin, make_key, make_token, upstream, settings_env, runtime,  # type: ignore[no-untyped-def]
            tmp_path_factory) -> Iterator[dict[str, tuple[str, str]]]:
    """scenario → (secret, batch id), each submitted before its credential or policy changed."""
    client = app.test_client()
    made: dict[str, tuple[str, str]] = {}
    keys = {name: make_key() for name in ("key_disabled", "key_revoked", "key_rotated_out", "control")}
    keys["key_expired"] = make_key(expires_at=(datetime.now(UTC) + timedelta(seconds=2)).isoformat())
    keys["policy_disabled"] = make_key("to-disable")
    keys["policy_deleted"] = make_key("to-delete")
    for name, made_key in keys.items():
        made[name] = (made_key["key"], _submit(client, made_key["key"]))
    tokens = {"token_expired": make_token(ttl_seconds=2), "token_revoked": make_token()}
    for name, token in tokens.items():
        made[name] = (token["token"], _submit(client, token["token"]))
    _ok(admin("POST", f"/admin/relay-keys/{keys['key_disabled']['id']}/disable"))
    _ok(admin("POST", f"/admin/relay-keys/{keys['key_revoked']['id']}/revoke"))
    _ok(admin("POST", f"/admin/relay-keys/{keys['key_rotated_out']['id']}/rotate", json={"grace_seconds": 0}))
    _ok(admin("POST", f"/admin/tokens/{tokens['token_revoked']['id']}/revoke"))
    _ok(admin("POST", "/admin/policies/to-disable/disable"))
    _ok(admin("DELETE", "/admin/policies/to-delete"))
    time.sleep(2.2)  # the expiring key and token are now past their time
    upstream.reset()
    workers = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=4,
                            **WORKER_SETTINGS)
    yield made
    workers.stop()


def _submit(client: Any, secret: str) -> str:
    res = submit(client, secret, [CHAT, CHAT])
    assert res.status_code == 202, res.get_data(as_text=True)
    return str(res.json["id"])


def _ok(res: Any) -> None:
    assert res.status_code in (200, 204), res.get_data(as_text=True)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "control"])
def test_items_fail_when_the_credential_or_policy_stopped_working(scenario, batches, runtime) -> None:
    _, batch_id = batches[scenario]
    items = _final_items(runtime, batch_id)
    assert {i["state"] for i in items} == {"discarded"}
    assert {i["error_code"] for i in items} == {scenario}
    if scenario == "policy_deleted":  # one policy check, one wording: a live request is refused the same
        assert {i["error"] for i in items} == {"the policy this request runs under was deleted"}
    if scenario == "policy_disabled":
        assert {i["error"] for i in items} == {"policy 'to-disable' is disabled"}
    assert [e["error_code"] for e in usage_events(runtime, batch_id)] == [scenario, scenario]


def test_only_items_of_working_credentials_reach_the_upstream(batches, client, runtime, upstream) -> None:
    secret, batch_id = batches["control"]
    assert wait_finished(client, secret, batch_id)["counts"]["completed"] == 2
    for _, other in batches.values():
        _final_items(runtime, other)
    assert upstream.stats()["total"] == 2


def _final_items(runtime, batch_id: str, timeout: float = 30) -> list[Any]:  # type: ignore[no-untyped-def]
    """The batch's items straight from Postgres, once every one is final."""
    deadline = time.monotonic() + timeout
    while True:
        with runtime.pool.connection() as conn:
            items = conn.execute("SELECT idx, state, error, error_code FROM batch_items WHERE batch_id = %s"
                                 " ORDER BY idx", (batch_id,)).fetchall()
        if all(i["state"] in ("completed", "discarded", "cancelled") for i in items):
            return items
        assert time.monotonic() < deadline, f"batch {batch_id} not final: {items}"
        time.sleep(0.1)
