"""A batch's items share one row of attribution and route names in usage (usage_batch_shared): their events store
neither, yet every reader sees them whole, before and after the batch is purged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from app.batches.retention import purge_batches
from tests.batches.helpers import CHAT, get, run_in_process, submit

KNOWN = ("credential_kind", "credential_id", "relay_key_hash_prefix", "principal_kind", "principal_id", "principal",
         "policy_id", "policy", "route", "model_requested", "model_resolved", "host_id", "host_name", "binding_id",
         "adapter")  # what every item that ran has (a project and a team only when the caller is in one)


def _events(client: Any, key: str, batch_id: str) -> list[dict[str, Any]]:
    res = get(client, key, "/v1/usage/events", batch_id=batch_id, limit=100)
    assert res.status_code == 200, res.get_data(as_text=True)
    return sorted(res.json["events"], key=lambda e: e["batch_idx"])


def test_a_batch_items_usage_reports_its_batch_attribution_after_the_batch_is_purged(client, key,  # type: ignore[no-untyped-def]
                                                                                     runtime) -> None:
    batch_id = str(submit(client, key, [CHAT] * 3).json["id"])
    assert run_in_process(runtime, batch_id, 3) == ["completed"] * 3
    batch = get(client, key, f"/v1/batches/{batch_id}").json
    before = _events(client, key, batch_id)

    assert purge_batches(runtime, datetime.now(UTC) + timedelta(seconds=1)).batches >= 1
    assert get(client, key, f"/v1/batches/{batch_id}").status_code == 404
    after = _events(client, key, batch_id)

    assert after == before and len(after) == 3
    for event in after:
        assert all(event[name] is not None for name in KNOWN), event
        assert {k: event[k] for k in ("policy_id", "project_id", "team_id")} == {
            k: batch[k] for k in ("policy_id", "project_id", "team_id")}
        assert event["request_id"] == f"{batch_id}:{event['batch_idx']}"
    with runtime.pool.connection() as conn:
        stored = conn.execute("SELECT shared, credential_kind, principal_id, policy_id, route, host_name"
                              " FROM usage_events WHERE batch_id = %s", (batch_id,)).fetchall()
    assert [dict(r) for r in stored] == [{"shared": 3, "credential_kind": None, "principal_id": None,
                                          "policy_id": None, "route": None, "host_name": None}] * 3
