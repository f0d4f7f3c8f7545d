"""Usage retention (`relay usage purge`, app/usage/retention.py): events created before a cutoff are folded into
hourly sums and deleted. Every summary of the folded hours (each grouping, bucket, filter and reader) answers as it
did before; the events list keeps only what was not folded; a batch that still exists keeps its items' events."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.usage.retention import purge_usage
from tests.usage.conftest import World, insert_event

pytestmark = pytest.mark.integration

# The folder's database holds no other events (conftest.py): the cutoff folds everything before it.
START = datetime(2018, 1, 1, tzinfo=UTC)
CUTOFF = START + timedelta(hours=4)
WINDOW = {"from": "2018-01-01T00:00:00Z", "to": "2018-01-02T00:00:00Z"}
GONE_BATCH = uuid.UUID("00000000-0000-4000-8000-0000000001b1")  # no batches row: its events are folded
KEPT_BATCH = uuid.UUID("00000000-0000-4000-8000-0000000001b2")  # a batches row: its events stay
GROUPINGS = [{}, {"group_by": "source"}, {"group_by": "model"}, {"group_by": "host"}, {"group_by": "policy"},
             {"group_by": "project"}, {"group_by": "team"}, {"group_by": "principal"}, {"group_by": "credential"},
             {"group_by": "batch"}, {"group_by": "model,credential", "bucket": "hour"}, {"bucket": "day"},
             {"status": "4xx"}, {"error_code": "upstream_error"}, {"model": "m-claude"}, {"source": "batch"},
             {"batch_id": str(GONE_BATCH)}, {"host": "h-openai"}, {"team": "tm-blue"}, {"principal": "user:u-ann"},
             {"from": "2018-01-01T02:00:00Z", "to": "2018-01-01T05:00:00Z"}]
READERS = ["admin", "KA", "KB", "TA1", "TB"]


def events(world: World) -> dict[str, tuple[str, float, dict[str, Any]]]:
    """label → (caller, hours after START, fields)."""
    gpt = {"model_requested": "m-gpt", "host_name": "h-openai", "host_id": world.host_ids["h-openai"]}
    claude = {"model_requested": "m-claude", "host_name": "h-anthropic", "host_id": world.host_ids["h-anthropic"]}
    return {
        "R1": ("KA", 0.1, {**gpt, "input_tokens": 1000, "output_tokens": 500, "cost_nanos": 1_234_567}),
        "R2": ("KA", 0.7, {**gpt, "input_tokens": 7, "output_tokens": 3, "cached_tokens": 5, "cost_nanos": 11}),
        "R3": ("KB", 1.2, {**claude, "status": 429, "error_code": "rate_limited"}),
        "R4": ("TA1", 1.5, {**gpt, "input_tokens": 10, "output_tokens": 10}),  # unpriced
        "R5": ("KA", 2.1, {**claude, "source": "batch", "batch_id": GONE_BATCH, "batch_idx": 0,
                           "input_tokens": 300, "output_tokens": 300, "cost_nanos": 5_400_000}),
        "R6": ("KA", 2.2, {**claude, "source": "batch", "batch_id": GONE_BATCH, "batch_idx": 1, "status": 502,
                           "upstream_status": 502, "error_code": "upstream_error"}),
        "R7": ("KA", 2.3, {**claude, "source": "batch", "batch_id": GONE_BATCH, "batch_idx": 2, "status": 499,
                           "error_code": "batch_cancelled"}),
        "R8": ("TB", 3.9, {"model_requested": "m-claude", "status": 404, "error_code": "model_not_found"}),
        "R9": ("KB", 3.0, {**gpt, "source": "batch", "batch_id": KEPT_BATCH, "batch_idx": 0, "input_tokens": 4,
                           "output_tokens": 4, "cost_nanos": 40}),
        "R10": ("KA", 4.5, {**gpt, "input_tokens": 2, "output_tokens": 2, "cost_nanos": 20}),  # after the cutoff
        "R11": ("TB", 5.0, {**claude, "input_tokens": 1, "output_tokens": 1, "cost_nanos": 9}),
    }


def summaries(client: Any, world: World) -> dict[tuple[str, str], Any]:
    answers = {}
    for who in READERS:
        for params in GROUPINGS:
            res = client.get("/v1/usage/summary", headers=world.headers(who), query_string={**WINDOW, **params})
            assert res.status_code == 200, res.json
            answers[(who, str(params))] = res.json
    return answers


def listed(client: Any, world: World, ids: dict[str, int]) -> list[str]:
    res = client.get("/v1/usage/events", headers=world.headers("admin"), query_string={**WINDOW, "limit": 100})
    assert res.status_code == 200, res.json
    by_id = {v: k for k, v in ids.items()}
    return sorted(by_id.get(e["id"], str(e["id"])) for e in res.json["events"])


def test_folded_hours_answer_every_summary_as_before_and_leave_the_events_list(client, runtime, world,
                                                                               settings_env) -> None:
    with runtime.pool.connection() as conn:
        conn.execute("INSERT INTO batches (id, shape, total, owner, policy_id, credential_kind, credential_id)"
                     " VALUES (%s, 'openai', 1, 'key:00', %s, 'relay_key', %s)",
                     (KEPT_BATCH, uuid.uuid4(), uuid.uuid4()))
    ids = {label: insert_event(runtime, world.callers[who], START + timedelta(hours=hours), **fields)
           for label, (who, hours, fields) in events(world).items()}
    before = summaries(client, world)
    assert before[("admin", "{}")]["totals"]["requests"] == 11
    assert before[("admin", "{}")]["totals"]["unpriced"] == 1

    dry = subprocess.run([sys.executable, "-m", "app.cli", "usage", "purge", "--before", CUTOFF.isoformat(),
                          "--dry-run"], env=settings_env, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "would fold 8 usage events" in dry.stdout  # R1..R8: R9's batch exists, R10 and R11 are newer
    assert listed(client, world, ids) == sorted(ids)

    report = purge_usage(runtime.pool, CUTOFF)
    assert report.events == 8
    assert listed(client, world, ids) == ["R10", "R11", "R9"]
    after = summaries(client, world)
    for key, answer in before.items():
        assert after[key] == answer, key
    assert purge_usage(runtime.pool, CUTOFF).events == 0  # nothing left to fold: the sums are not added twice
    assert summaries(client, world) == before

    with runtime.pool.connection() as conn:
        shared = {r["batch_id"] for r in conn.execute("SELECT batch_id FROM usage_batch_shared WHERE batch_id ="
                                                      " ANY(%s)", ([GONE_BATCH, KEPT_BATCH],)).fetchall()}
        assert shared == {KEPT_BATCH}  # the gone batch's shared row went with its last event
        conn.execute("DELETE FROM batches WHERE id = %s", (KEPT_BATCH,))
    assert purge_usage(runtime.pool, CUTOFF).events == 1  # the batch is gone: its event is folded now
    assert listed(client, world, ids) == ["R10", "R11"]
    assert summaries(client, world) == before

