"""Retention: a submitter deletes a finished batch (DELETE /v1/batches/{id}); operators purge every batch finished
before a date (`relay batches purge`). Rows and payload files go, usage events stay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from app.batches import lifecycle
from app.batches.retention import purge_batches
from app.batches.service import payload_store
from devtools.processes import ROOT
from tests.batches.helpers import CHAT, get, run_in_process, submit, usage_events


def _delete(client: Any, key: str, batch_id: str) -> Any:
    return client.delete(f"/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"})


def _finished_batch(client: Any, key: str, runtime: Any, count: int = 3) -> str:
    batch_id = str(submit(client, key, [CHAT] * count).json["id"])
    assert run_in_process(runtime, batch_id, count) == ["completed"] * count
    return batch_id


def test_the_submitter_deletes_a_finished_batch_with_its_files_and_its_usage_events_stay(client, key,
                                                                                        runtime) -> None:
    batch_id = _finished_batch(client, key, runtime)
    folder = payload_store(runtime).batch_dir(UUID(batch_id))
    assert sorted(p.suffix for p in folder.iterdir()) == [".bin", ".seg"]

    res = _delete(client, key, batch_id)

    assert res.status_code == 200, res.get_data(as_text=True)
    assert res.json == {"id": batch_id, "object": "batch", "deleted": True}
    assert not folder.exists()
    for path in (f"/v1/batches/{batch_id}", f"/v1/batches/{batch_id}/results"):
        gone = get(client, key, path)
        assert gone.status_code == 404 and gone.json["error"]["code"] == "batch_not_found"
    assert _delete(client, key, batch_id).status_code == 404
    assert batch_id not in [b["id"] for b in get(client, key, "/v1/batches", limit=100).json["data"]]
    assert [e["batch_idx"] for e in usage_events(runtime, batch_id)] == [0, 1, 2]


def test_a_batch_with_items_still_queued_or_running_is_a_409_and_stays_whole(client, key, runtime) -> None:
    batch_id = str(submit(client, key, [CHAT] * 3).json["id"])
    with runtime.pool.connection() as conn:
        assert lifecycle.claim_item(conn, UUID(batch_id), 0, "elsewhere") is not None  # as a worker elsewhere does
    try:
        res = _delete(client, key, batch_id)
        assert res.status_code == 409
        assert res.json["error"]["code"] == "batch_not_finished"
        assert res.json["error"]["details"] == {"queued": 2, "running": 1}
        assert payload_store(runtime).read_request(UUID(batch_id), 2)
        assert get(client, key, f"/v1/batches/{batch_id}").json["total"] == 3
        cancelled = client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
        assert cancelled.json["counts"]["running"] == 1  # a cancelled batch whose item still runs: still a 409
        assert _delete(client, key, batch_id).status_code == 409
    finally:
        with runtime.pool.connection() as conn:
            conn.execute("UPDATE batch_items SET state = 'cancelled', finished_at = now() WHERE batch_id = %s"
                         " AND state IN ('queued', 'running')", (batch_id,))
    assert _delete(client, key, batch_id).status_code == 200


def test_only_the_submitter_may_delete_a_batch_everyone_else_gets_404(client, key, make_key, runtime) -> None:
    batch_id = str(submit(client, key, [CHAT]).json["id"])
    client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
    other = make_key()["key"]
    for who, target in ((other, batch_id), (key, "not-an-id"), (key, str(uuid4()))):
        res = _delete(client, who, target)
        assert res.status_code == 404 and res.json["error"]["code"] == "batch_not_found"
    assert client.delete(f"/v1/batches/{batch_id}").status_code == 401
    assert get(client, key, f"/v1/batches/{batch_id}").status_code == 200


def _backdate(runtime: Any, batch_id: str, days: int) -> None:
    with runtime.pool.connection() as conn:
        conn.execute("UPDATE batches SET finished_at = now() - make_interval(days => %s) WHERE id = %s",
                     (days, batch_id))


def _stray_folder(runtime: Any, age_s: float) -> UUID:
    """A payload folder with no batch row (a DELETE cut before its files went), AGE_S old."""
    stray = uuid4()
    folder = payload_store(runtime).batch_dir(stray)
    folder.mkdir()
    (folder / "requests.bin").write_bytes(b"x")
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return stray


def test_purge_deletes_batches_finished_before_the_date_and_stray_folders_and_nothing_else(client, key,
                                                                                          runtime) -> None:
    old, recent = _finished_batch(client, key, runtime), _finished_batch(client, key, runtime)
    _backdate(runtime, old, days=40)
    running = str(submit(client, key, [CHAT]).json["id"])
    stray, fresh_stray = _stray_folder(runtime, age_s=40 * 86400), _stray_folder(runtime, age_s=60)
    store = payload_store(runtime)
    cutoff = datetime.now(UTC) - timedelta(days=30)

    preview = purge_batches(runtime, cutoff, dry_run=True)
    assert (preview.batches, preview.items, preview.stray_folders) == (1, 3, 1)
    assert store.batch_dir(UUID(old)).exists() and store.batch_dir(stray).exists()

    report = purge_batches(runtime, cutoff)

    assert (report.batches, report.items, report.stray_folders, report.left_behind) == (1, 3, 1, 0)
    assert get(client, key, f"/v1/batches/{old}").status_code == 404
    assert not store.batch_dir(UUID(old)).exists() and not store.batch_dir(stray).exists()
    assert len(usage_events(runtime, old)) == 3
    for kept in (recent, running):
        assert get(client, key, f"/v1/batches/{kept}").status_code == 200 and store.batch_dir(UUID(kept)).exists()
    assert store.batch_dir(fresh_stray).exists()  # its submit may still be committing
    client.post(f"/v1/batches/{running}/cancel", headers={"Authorization": f"Bearer {key}"})


def test_the_purge_command_takes_a_date_or_an_age_and_reports_what_it_removed(client, key, runtime,
                                                                             settings_env) -> None:
    batch_id = _finished_batch(client, key, runtime, count=2)
    _backdate(runtime, batch_id, days=400)

    def purge(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app.cli", "batches", "purge", *args], cwd=ROOT,
                              env=settings_env, capture_output=True, text=True, timeout=120, check=False)

    dry = purge("--finished-before", "365d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would purge 1 batches (2 items) finished before")
    done = purge("--finished-before", (datetime.now(UTC) - timedelta(days=365)).date().isoformat())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("purged 1 batches (2 items)")
    assert get(client, key, f"/v1/batches/{batch_id}").status_code == 404
    bad = purge("--finished-before", "last tuesday")
    assert bad.returncode == 2 and "not a date, a time or an age" in bad.stderr


@pytest.fixture(scope="module", autouse=True)
def _no_leftovers(runtime) -> Any:  # type: ignore[no-untyped-def]
    """Batches submitted here must not be run later by another module's workers."""
    yield
    with runtime.pool.connection() as conn:
        conn.execute("UPDATE batch_items SET state = 'cancelled' WHERE state = 'queued'")
        conn.execute("UPDATE batches SET status = 'cancelled' WHERE status = 'queued'")
