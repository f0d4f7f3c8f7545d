"""The S3 payload backend's guarantees on a real S3 server (SeaweedFS) and real `relay api` / `relay worker`
processes: a batch is stored whole or not at all (the object store down or refusing at submit: 507 and nothing in
Postgres); a response is durable (in the response spool, then packed into the bucket) before its item's final
state commits, and with the store stopped mid-drain and back nothing is lost or run twice, every item that could not
be read recorded as such; delete and purge remove the objects and the spool's rows; and replicas that share nothing
but Postgres, RabbitMQ and the bucket (each its own RELAY_BATCH_PAYLOAD_DIR) complete every item, results and
output files served by either API."""

from __future__ import annotations

import base64
import io
import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from app.batches.retention import purge_batches
from devtools.fake_upstream.harness import FakeUpstream
from devtools.seaweedfs import SeaweedFS
from devtools.services import ServiceUrls
from devtools.stack import Stack, item_requests, upstream_key
from devtools.waiting import until
from tests.batches.provider_helpers import jsonl, wait_openai

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 600
# the outage (a stop, 3 s, a start) must meet items still waiting: about 14 s of items at 150 ms on 16 threads
DRAIN_ITEMS = 1500


@pytest.fixture(scope="module")
def s3_stack(services: ServiceUrls, fault_upstream: FakeUpstream, seaweedfs: SeaweedFS,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Relay on its own database and vhost, its payloads in the SeaweedFS bucket."""
    built = Stack.on_own_services("s3", upstream=fault_upstream, workdir=tmp_path_factory.mktemp("s3-stack"),
                                  **seaweedfs.settings())
    yield built
    built.close()


@pytest.fixture()
def on_s3(s3_stack: Stack, fresh_upstream: FakeUpstream, seaweedfs: SeaweedFS) -> Iterator[Stack]:
    """The S3 stack for one test; its processes are killed afterwards and the object store is up again."""
    yield s3_stack
    s3_stack.stop_processes()
    if seaweedfs.proc is None:
        seaweedfs.start()


def _keys(server: SeaweedFS, prefix: str = "") -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix)
    return sorted(entry["Key"] for page in pages for entry in page.get("Contents", ()))


def _noise(seed: int) -> str:
    """5,000 characters that compress to about 3,750 bytes (random bytes in base64: the request file is
    compressed in the bucket)."""
    return base64.b64encode(random.Random(seed).randbytes(3750)).decode()


def _spooled(stack: Stack, batch_id: str) -> int:
    """The batch's rows in the response spool (its responses not packed into the bucket yet)."""
    return int(stack.db_one("SELECT count(*) AS n FROM payload_spool WHERE batch_id = %s", batch_id)["n"])


def _batch_rows(stack: Stack, key_id: str) -> int:
    return int(stack.db_one("SELECT count(*) AS n FROM batches WHERE credential_id = %s", key_id)["n"])


def _submit(api_url: str, key: str, requests_: list[dict[str, Any]]) -> requests.Response:
    return requests.post(f"{api_url}/v1/batches", json={"shape": "openai", "requests": requests_}, timeout=120,
                         headers={"Authorization": f"Bearer {key}"})


def test_a_submit_while_the_object_store_is_down_or_refusing_is_507_and_nothing_is_stored(
        on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    stack = on_s3
    record = stack.new_key_record("disk")
    refusing = stack.start_api(s3_bucket="no-such-bucket")
    res = _submit(refusing.url, record["key"], item_requests("s3-refused", 50))
    assert res.status_code == 507, res.text
    assert res.json()["error"]["code"] == "payload_store_unavailable" and "NoSuchBucket" in res.text

    seaweedfs.stop()
    down = stack.call(record["key"], "POST", "/v1/batches",
                      json={"shape": "openai", "requests": item_requests("s3-down", 50)})
    assert down.status_code == 507, down.get_data(as_text=True)
    assert down.json["error"]["code"] == "payload_store_unavailable"
    assert _batch_rows(stack, record["id"]) == 0
    seaweedfs.start()

    batch_id = stack.submit(record["key"], "s3-back", 3)
    assert _keys(seaweedfs, batch_id) == [f"{batch_id}/requests.bin"]
    assert _batch_rows(stack, record["id"]) == 1


def test_a_large_body_that_fails_validation_midway_leaves_no_object_and_no_open_upload(
        on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    """A body of several upload parts whose item 1,000 of 3,000 is bad: the request file was streaming into a
    multipart upload while the items were checked; the 400 leaves neither an object nor an open upload."""
    stack = on_s3
    record = stack.new_key_record("disk")
    api = stack.start_api()
    client = seaweedfs.client()
    keys_before = _keys(seaweedfs)
    padded = [{**body, "messages": [{"role": "user", "content": f"s3-bad-{idx} " + _noise(idx)}]}
              for idx, body in enumerate(item_requests("s3-bad", 3000))]  # ~15 MB (~11 MB compressed): two parts
    padded[1000]["messages"] = "not a list"
    res = _submit(api.url, record["key"], padded)
    assert res.status_code == 400, res.text
    assert res.json()["error"]["code"] == "invalid_batch" and "requests[1000]" in res.text
    assert _keys(seaweedfs) == keys_before and _batch_rows(stack, record["id"]) == 0
    assert client.list_multipart_uploads(Bucket=seaweedfs.bucket).get("Uploads", []) == []

    res = _submit(api.url, record["key"], padded[:1000] + padded[1001:])  # the same, valid: stored whole
    assert res.status_code == 202, res.text
    assert _keys(seaweedfs, res.json()["id"]) == [f"{res.json()['id']}/requests.bin"]


def test_the_object_store_stopped_mid_drain_loses_nothing_and_runs_nothing_twice(
        on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    stack = on_s3
    key = stack.new_key("disk")
    stack.upstream.control(upstream_key("disk"), latency_ms=150)
    stack.start_worker(threads=8)
    stack.start_worker(threads=8)
    batch_id = stack.submit(key, "s3-drain", DRAIN_ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    seaweedfs.stop()
    completed = stack.count_items(batch_id, "completed")
    time.sleep(3)  # items wait for their requests; those that ran keep their responses in memory, uploads failing
    final_during = stack.count_items(batch_id, "completed", "discarded")
    seaweedfs.start()

    accounting = stack.account(key, batch_id, "s3-drain", DRAIN_ITEMS, timeout=180)  # every completed one readable
    assert final_during < DRAIN_ITEMS  # the outage really happened mid-drain
    states, codes = accounting.states(), accounting.error_codes()
    assert set(states) <= {"completed", "discarded"} and states["completed"] >= completed
    # recorded, never silent: an answer not kept, a request not read, or a request waited for past the item's
    # time limit (10 s on these workers)
    assert set(codes) <= {"payload_store_unavailable", "load_input_failed", "time_limit_exceeded"}, codes
    print(f"outage: {dict(states)} {dict(codes)}")


def test_delete_and_purge_remove_the_batchs_objects(on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    stack = on_s3
    key = stack.new_key("disk")
    stack.start_worker(threads=4)
    deleted, purged = stack.submit(key, "s3-delete", 20), stack.submit(key, "s3-purge", 20)
    for batch_id in (deleted, purged):
        stack.wait_finished(key, batch_id)
        until(lambda batch_id=batch_id: len(_keys(seaweedfs, batch_id)), lambda n: n >= 2, timeout=60,
              what="the requests and a pack of responses")  # packed once the batch is idle 2 s
    _leave_a_spool_row(stack, key, purged)  # and a response still in the spool
    assert _spooled(stack, purged) == 1

    res = stack.call(key, "DELETE", f"/v1/batches/{deleted}")
    assert res.status_code == 200, res.get_data(as_text=True)
    assert _keys(seaweedfs, deleted) == []
    report = purge_batches(stack.runtime, datetime.now(UTC) + timedelta(seconds=1))
    assert report.batches >= 1 and report.left_behind == 0
    assert _keys(seaweedfs, purged) == [] and _spooled(stack, purged) == 0


def _leave_a_spool_row(stack: Stack, key: str, batch_id: str) -> None:
    """A response row in the spool for BATCH_ID, as a worker process that died before packing it leaves one."""
    with stack.runtime.pool.connection() as conn:
        conn.execute("INSERT INTO payload_spool (batch_id, name, data) VALUES (%s, 'responses-1-2-3.seg', 'x')",
                     (batch_id,))


def test_replicas_sharing_only_the_services_and_the_bucket_complete_every_item(
        on_s3: Stack, seaweedfs: SeaweedFS, tmp_path: Path) -> None:
    stack = on_s3
    key = stack.new_key("disk")
    stack.upstream.control(upstream_key("disk"), latency_ms=20)
    apis = [stack.start_api(batch_payload_dir=tmp_path / f"api-{n}") for n in range(2)]
    for n in range(2):
        stack.start_worker(threads=8, batch_payload_dir=tmp_path / f"worker-{n}")
    native = [_submit(api.url, key, item_requests(f"s3-replica-{n}", 300)) for n, api in enumerate(apis)]
    assert [res.status_code for res in native] == [202, 202], [res.text for res in native]
    client = openai.OpenAI(base_url=apis[1].url + "/v1", api_key=key, max_retries=0)
    lines = [{"custom_id": f"c{i}", "model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"q{i}"}]}
             for i in range(200)]
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    created = openai.OpenAI(base_url=apis[0].url + "/v1", api_key=key, max_retries=0).batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_openai(client, created.id, timeout=180)
    assert done.request_counts.completed == 200 and done.request_counts.failed == 0

    for n, res in enumerate(native):
        accounting = stack.account(key, res.json()["id"], f"s3-replica-{n}", 300)
        assert accounting.states() == {"completed": 300}  # 0 load-input errors: every replica reads every request
        for api in apis:
            results = requests.get(f"{api.url}/v1/batches/{res.json()['id']}/results", timeout=60,
                                   headers={"Authorization": f"Bearer {key}"}).json()["results"]
            assert [r["idx"] for r in results] == list(range(300))
            assert all(r["response"]["object"] == "chat.completion" for r in results)
    for api in apis:
        output = openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0).files.content(
            done.output_file_id).text.splitlines()
        assert sorted(json.loads(line)["custom_id"] for line in output) == sorted(f"c{i}" for i in range(200))
    for folder in tmp_path.iterdir():  # nothing kept on a replica's own disk: staging only, and it is empty
        assert [p for p in folder.rglob("*") if p.is_file()] == [], folder


def test_results_stream_in_order_and_are_cut_visibly_when_the_batch_is_deleted_meanwhile(
        on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    stack = on_s3
    key = stack.new_key("disk")
    stack.start_worker(threads=16)
    batch_id = stack.submit(key, "s3-cut", 2100)  # two pages of results (2,000 items each)
    stack.wait_finished(key, batch_id, timeout=180)
    whole = stack.call(key, "GET", f"/v1/batches/{batch_id}/results", query_string={"format": "jsonl"})
    lines = [json.loads(line) for line in whole.get_data().splitlines()]
    assert [line["idx"] for line in lines] == list(range(2100))
    assert all(line["response"]["object"] == "chat.completion" for line in lines)

    streamed = stack.call(key, "GET", f"/v1/batches/{batch_id}/results", query_string={"format": "jsonl"},
                          buffered=False)
    chunks = iter(streamed.response)
    first = b"".join(next(chunks) for _ in range(2))  # the opening and the first page, read before the delete
    assert stack.call(key, "DELETE", f"/v1/batches/{batch_id}").status_code == 200
    assert _keys(seaweedfs, batch_id) == []
    *kept, last = (first + b"".join(chunks)).rstrip(b"\n").split(b"\n")
    assert 0 < len(kept) < 2100 and json.loads(last)["error"]["code"] == "results_incomplete"


def test_a_finished_batch_ends_as_a_few_packs_and_its_results_stay_whole_while_it_is_packed(
        on_s3: Stack, seaweedfs: SeaweedFS) -> None:
    stack = on_s3
    key = stack.new_key("disk")
    stack.start_worker(threads=8)
    stack.start_worker(threads=8)
    batch_id = stack.submit(key, "s3-packs", ITEMS)
    stack.wait_finished(key, batch_id, timeout=180)
    deadline, reads = time.monotonic() + 90, 0
    while True:  # results read over and over while the workers pack the batch's spool rows (idle: after 2 s)
        keys, spooled = _keys(seaweedfs, f"{batch_id}/"), _spooled(stack, batch_id)
        res = stack.call(key, "GET", f"/v1/batches/{batch_id}/results", query_string={"format": "jsonl"})
        lines = [json.loads(line) for line in res.get_data().splitlines()]
        assert [line["idx"] for line in lines] == list(range(ITEMS))
        assert all(line["response"]["object"] == "chat.completion" for line in lines), lines[-1]
        reads += 1
        if not spooled or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    packs = [k for k in keys if "/packed-" in k]
    assert spooled == 0 and packs, keys  # every row packed, a process's lone last one too
    assert len(keys) <= 12 and reads >= 1, keys  # ~100 rows (one per group commit) before
