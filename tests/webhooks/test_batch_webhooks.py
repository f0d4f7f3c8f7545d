"""`GET /v1/batches/{id}/webhooks`: a batch's submitter sees the deliveries of its events, every attempt included
(a project's endpoint by its origin only, its own callback_url whole); anyone else gets 404, as for the batch."""

from __future__ import annotations

import time
from typing import Any

import pytest

from devtools.processes import RelayProcess
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import CALLBACK_SECRET, submit, wait_delivery

pytestmark = pytest.mark.integration


def own_deliveries(stack: Stack, key: str, batch_id: str, settled: int, timeout: float = 30) -> list[dict[str, Any]]:
    """The submitter's view once SETTLED of its deliveries are delivered."""
    deadline = time.monotonic() + timeout
    while True:
        res = stack.call(key, "GET", f"/v1/batches/{batch_id}/webhooks")
        assert res.status_code == 200, res.get_data(as_text=True)
        data: list[dict[str, Any]] = res.json["data"]
        if sum(d["state"] == "delivered" for d in data) >= settled:
            return data
        assert time.monotonic() < deadline, data
        time.sleep(0.1)


def test_the_submitter_sees_its_batchs_deliveries_with_every_attempt_and_no_one_else_does(
        stack: Stack, worker: RelayProcess, receiver: Receiver, apply_catalog: Any) -> None:
    apply_catalog(project=[{"url": f"{receiver.url}/project?token=operator-only", "secret": CALLBACK_SECRET}])
    receiver.behave("/project", status=500, times=1)
    key = stack.new_key("hooks")
    batch_id = submit(stack, key, callback_url=f"{receiver.url}/callback?job=7", callback_secret=CALLBACK_SECRET)
    wait_delivery(stack, batch_id, "delivered")
    seen = {d["destination"]: d for d in own_deliveries(stack, key, batch_id, settled=2)}
    assert set(seen) == {"project:p-hooks", "callback"}
    project, callback = seen["project:p-hooks"], seen["callback"]
    assert project["url"] == receiver.url and "operator-only" not in str(project)  # the origin only
    assert callback["url"] == f"{receiver.url}/callback?job=7"
    assert project["event_type"] == "batch.finished" and project["batch_id"] == batch_id
    assert [a["status"] for a in project["attempt_log"]] == [500, 200] and project["attempts"] == 2
    assert [a["status"] for a in callback["attempt_log"]] == [200]
    assert all(a["latency_ms"] is not None for a in project["attempt_log"])

    other = stack.call(stack.new_key("hooks"), "GET", f"/v1/batches/{batch_id}/webhooks")
    assert other.status_code == 404 and other.json["error"]["code"] == "batch_not_found"
    missing = stack.call(key, "GET", "/v1/batches/not-a-batch/webhooks")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "batch_not_found"


def test_a_batch_without_webhooks_has_no_deliveries(stack: Stack, worker: RelayProcess,
                                                    apply_catalog: Any) -> None:
    apply_catalog(project=[])
    key = stack.new_key("hooks")
    batch_id = submit(stack, key)
    stack.wait_finished(key, batch_id)
    res = stack.call(key, "GET", f"/v1/batches/{batch_id}/webhooks")
    assert res.status_code == 200 and res.json == {"data": []}
