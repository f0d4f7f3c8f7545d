"""Faults at intake, on a real `relay api`: the API killed around a submit, and a payload directory that cannot
be written. A batch is stored whole or not at all, and once stored it runs even though its API died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devtools.stack import Stack, item_requests, upstream_key

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 600


def _submit(api_url: str, key: str, body: Any) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(f"{api_url}/v1/batches", data=data, timeout=120,
                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})


def _batches_of(stack: Stack, key_id: str) -> list[dict[str, Any]]:
    with stack.runtime.pool.connection() as conn:
        rows = conn.execute("SELECT id, total, (SELECT count(*) FROM batch_items i WHERE i.batch_id = b.id) AS items"
                            " FROM batches b WHERE credential_id = %s", (key_id,)).fetchall()
    return [dict(r) for r in rows]


def test_a_batch_committed_by_an_api_killed_right_after_runs_when_workers_start(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("api")
    stack.upstream.control(upstream_key("api"), latency_ms=50)
    api = stack.start_api()  # no worker runs yet
    res = _submit(api.url, key, {"shape": "openai", "requests": item_requests("api", ITEMS)})
    assert res.status_code == 202, res.text
    batch_id = res.json()["id"]
    api.stop(signal.SIGKILL)

    queued = stack.item_rows(batch_id, "state = 'queued' AND published_at IS NULL")
    assert len(queued) == ITEMS  # committed, and the API published nothing: its death loses nothing
    stack.start_worker()
    stack.start_worker()

    accounting = stack.account(key, batch_id, "api", ITEMS)
    assert accounting.states() == {"completed": ITEMS}


def test_an_api_killed_while_writing_a_batch_stores_nothing_of_it(shared: Stack) -> None:
    stack = shared
    record = stack.new_key_record("api")
    api = stack.start_api()
    staging = Path(stack.settings.batch_payload_dir) / ".staging"
    before = set(os.listdir(staging)) if staging.exists() else set()
    padded = [{**item, "messages": [{"role": "user", "content": f"cut-item-{idx} " + "x" * 1000}]}
              for idx, item in enumerate(item_requests("cut", 30_000))]  # ~30 MiB: writing it takes a while
    body = json.dumps({"shape": "openai", "requests": padded}).encode()
    answers: list[Any] = []
    sender = threading.Thread(target=lambda: answers.append(_try_submit(api.url, record["key"], body)))
    sender.start()
    deadline = time.monotonic() + 60
    while not (staging.exists() and set(os.listdir(staging)) - before):  # the request file is being written
        assert time.monotonic() < deadline and sender.is_alive(), f"the submit ended first: {answers}"
        time.sleep(0.002)
    api.stop(signal.SIGKILL)  # the whole process group at once: its worker never finishes the file
    sender.join(60)

    assert answers and not isinstance(answers[0], requests.Response)  # the connection died: no answer
    (cut,) = set(os.listdir(staging)) - before
    assert _batches_of(stack, record["id"]) == []  # nothing in Postgres
    assert not (Path(stack.settings.batch_payload_dir) / cut).exists()  # nothing visible: only a staging leftover


def _try_submit(url: str, key: str, body: bytes) -> Any:
    try:
        return _submit(url, key, body)
    except requests.RequestException as exc:
        return exc


@pytest.fixture()
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: room for a few files only (root ignores permissions, but not a full disk)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _visible(root: Path) -> list[str]:
    """Every file under ROOT outside the staging area (what a reader could see)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and ".staging" not in p.relative_to(root).parts)


def test_a_full_payload_filesystem_answers_507_and_stores_nothing(shared: Stack, tiny_filesystem: Path) -> None:
    stack = shared
    record = stack.new_key_record("disk")
    api = stack.start_api(batch_payload_dir=tiny_filesystem)
    too_big = item_requests("disk", 2 * ITEMS)  # ~100 bytes each: the request file outgrows the 64 KiB

    res = _submit(api.url, record["key"], {"shape": "openai", "requests": too_big})

    assert res.status_code == 507, res.text
    error = res.json()["error"]
    assert error["code"] == "payload_store_unavailable" and "No space left on device" in error["message"]
    assert _batches_of(stack, record["id"]) == []
    assert [p for p in tiny_filesystem.rglob("*") if p.is_file()] == []  # the half-written file went, staging too
    small = _submit(api.url, record["key"], {"shape": "openai", "requests": item_requests("disk-small", 3)})
    assert small.status_code == 202, small.text  # its space came back
    assert _visible(tiny_filesystem) == [f"{small.json()['id']}/requests.bin"]


def test_a_payload_directory_that_cannot_exist_answers_507_and_stores_nothing(shared: Stack, tmp_path: Path) -> None:
    stack = shared
    record = stack.new_key_record("disk")
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file where a directory should be")
    api = stack.start_api(batch_payload_dir=blocker / "payloads")

    res = _submit(api.url, record["key"], {"shape": "openai", "requests": item_requests("nodir", ITEMS)})

    assert res.status_code == 507, res.text
    assert res.json()["error"]["code"] == "payload_store_unavailable"
    assert "Not a directory" in res.json()["error"]["message"]
    assert _batches_of(stack, record["id"]) == []
    assert requests.get(f"{api.url}/readyz", timeout=10).status_code == 200  # the API itself is fine
