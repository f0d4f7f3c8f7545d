"""A `relay api` stopped with SIGTERM while calls are in flight commits the usage event of every call it answered."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from app.runtime import Runtime
from devtools.fake_upstream.harness import FakeUpstream
from devtools.processes import start_api
from devtools.waiting import until
from tests.live.conftest import bearer
from tests.pipeline.helpers import CHAT

pytestmark = pytest.mark.integration


def test_a_graceful_stop_loses_no_usage_event(live_env: dict[str, str], admin: Any, upstream: FakeUpstream,
                                              runtime: Runtime, tmp_path: Path) -> None:
    api = start_api(live_env, tmp_path, workers=2)
    res = admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account", "principal": "pipeline-svc",
                                                   "policy": "main"})
    key = str(res.json["key"])
    until(lambda: requests.get(f"{api.url}/v1/models", headers=bearer(key), timeout=10).status_code == 200,
             what="the key on the API")
    upstream.reset()
    upstream.control("sk-oa-1", latency_ms=300)  # calls are in flight when the stop comes
    answered: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        with requests.Session() as session:
            for _ in range(20):  # bounded: the stop ends it sooner
                request_id = uuid.uuid4().hex
                try:
                    res = session.post(f"{api.url}/v1/chat/completions", json=CHAT, timeout=30,
                                       headers={**bearer(key), "x-request-id": request_id})
                except requests.RequestException:
                    return  # the API has stopped
                if res.status_code == 200:
                    with lock:
                        answered.append(request_id)

    clients = [threading.Thread(target=client) for _ in range(8)]
    for thread in clients:
        thread.start()
    until(lambda: len(answered) >= 16, timeout=30, what="calls answered before the stop")
    api.stop()  # SIGTERM to the master: workers finish their calls, then flush the usage writer
    for thread in clients:
        thread.join(60)
    assert api.proc.returncode == 0, api.log()[-2000:]
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT request_id, count(*) AS n FROM usage_events WHERE request_id = ANY(%s)"
                            " GROUP BY request_id", (answered,)).fetchall()
    counts = {row["request_id"]: row["n"] for row in rows}  # type: ignore[call-overload]
    assert counts == dict.fromkeys(answered, 1)
