"""The S3 payload backend on a real S3 server (SeaweedFS, which checks signatures, ranges, multipart uploads and
If-None-Match): the layout, whole-or-nothing writes, one object per sync, reads by byte range, failed uploads kept
and retried, removal and listing, uploads."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from app.payload_port import FileBytesMissing, PayloadMissing, PayloadStoreUnavailable, ResponseRef
from app.payload_s3 import S3Store
from app.payload_s3_blocks import BLOCK
from app.payload_s3_client import passing, s3_client, status
from app.settings import Settings
from devtools.seaweedfs import SeaweedFS, start_seaweedfs


def _bodies(count: int) -> list[bytes]:
    return [f'{{"model":"m","messages":[{{"role":"user","content":"item {i} {"é" * (i % 5)}"}}]}}'.encode()
            for i in range(count)]


def _store(server: SeaweedFS, staging: Path, prefix: str | None = None) -> S3Store:
    return S3Store(server.client(), server.bucket, prefix if prefix is not None else f"t-{uuid4().hex[:8]}/",
                   staging, mode=0o600)


def _keys(store: S3Store) -> list[str]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=store.prefix)
    return sorted(e["Key"][len(store.prefix):] for page in pages for e in page.get("Contents", ()))


@pytest.fixture()
def store(seaweedfs: SeaweedFS, tmp_path: Path) -> Iterator[S3Store]:
    found = _store(seaweedfs, tmp_path / "staging")
    yield found
    found.close()


@pytest.fixture()
def own_server() -> Iterator[SeaweedFS]:
    """A server of this test alone, which it may stop and start."""
    server = start_seaweedfs()
    yield server
    server.close()


def test_a_batch_of_requests_is_one_object_and_each_item_reads_back_by_range(store: S3Store) -> None:
    batch, bodies = uuid4(), _bodies(3000)
    store.write_requests(batch, iter(bodies))
    assert _keys(store) == [f"{batch}/requests.bin"]
    assert [store.read_request(batch, idx) for idx in range(3000)] == bodies
    for idx in (-1, 3000):
        with pytest.raises(PayloadMissing):
            store.read_request(batch, idx)
    with pytest.raises(PayloadMissing):
        store.read_request(uuid4(), 0)
    assert not any(Path(store.staging).iterdir())  # the local staging file is gone


def test_items_read_by_many_threads_share_one_ranged_get_per_block_of_the_request_file(
        store: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = uuid4()
    bodies = [b'{"n":%d,"pad":"%s"}' % (i, b"p" * (i % 700)) for i in range(3000)]  # ~1 MB: 5 blocks
    store.write_requests(batch, bodies)
    gets: list[int] = []
    read = store.get
    monkeypatch.setattr(store, "get", lambda key, offset, length: gets.append(length) or read(key, offset, length))
    found: dict[int, bytes] = {}

    def run(first: int) -> None:
        for idx in range(first, 3000, 8):
            found[idx] = store.read_request(batch, idx)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [found[idx] for idx in range(3000)] == bodies
    blocks = -(-sum(map(len, bodies)) // BLOCK)
    assert len(gets) == blocks + 1  # each block once, and the offsets' index (its trailer is read apart)


def test_a_large_request_file_goes_up_in_a_multipart_upload_and_reads_back(store: S3Store) -> None:
    batch = uuid4()
    bodies = [b'{"pad":"' + bytes([97 + i % 26]) * 9000 + b'"}' for i in range(1200)]  # ~10.8 MB: 2 parts
    store.write_requests(batch, bodies)
    head = store.client.head_object(Bucket=store.bucket, Key=store.key(batch, "requests.bin"))
    assert head["ETag"].strip('"').endswith("-2")  # a multipart upload's ETag names its parts
    assert [store.read_request(batch, idx) for idx in (0, 599, 1199)] == [bodies[0], bodies[599], bodies[1199]]


def test_an_abandoned_or_failing_write_leaves_nothing(store: S3Store) -> None:
    def failing() -> Iterator[bytes]:
        yield from _bodies(2000)
        raise OSError(28, "No space left on device")

    batch = uuid4()
    with pytest.raises(PayloadStoreUnavailable, match="No space left on device"):
        store.write_requests(batch, failing())
    with pytest.raises(PayloadStoreUnavailable, match="abandoned"):
        store.write_requests(batch, _bodies(3000), lambda: True)
    assert _keys(store) == [] and not any(Path(store.staging).iterdir())


def test_a_store_that_is_down_or_refuses_is_unavailable_and_nothing_is_kept(own_server: SeaweedFS,
                                                                            tmp_path: Path) -> None:
    wrong = SeaweedFS(own_server.workdir, bucket=own_server.bucket, access_key=own_server.access_key,
                      secret_key="not-the-secret", ports=own_server.ports)
    refused = S3Store(wrong.client(), own_server.bucket, "p/", tmp_path, mode=0o600)
    with pytest.raises(PayloadStoreUnavailable, match="SignatureDoesNotMatch"):
        refused.write_requests(uuid4(), _bodies(10))
    own_server.stop()
    down = _store(own_server, tmp_path, "p/")
    with pytest.raises(PayloadStoreUnavailable, match="cannot write the batch's request file"):
        down.write_requests(uuid4(), _bodies(10))
    own_server.start()
    assert _keys(down) == []


def test_responses_kept_by_many_threads_are_one_object_per_batch_per_sync(store: S3Store) -> None:
    batches = [uuid4(), uuid4()]
    refs: dict[tuple[int, int], ResponseRef] = {}

    def keep(thread: int) -> None:
        for n in range(50):
            refs[thread, n] = store.append_response(batches[n % 2], n, f'{{"t":{thread},"n":{n}}}'.encode())

    threads = [threading.Thread(target=keep, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.sync()
    assert len(_keys(store)) == 2  # one object per batch
    for (thread, n), ref in refs.items():
        assert store.read_response(batches[n % 2], n, ref) == f'{{"t":{thread},"n":{n}}}'.encode()
    store.append_response(batches[0], 999, b'{"late":1}')
    store.sync()
    store.sync()  # nothing kept since: nothing to upload
    assert len(_keys(store)) == 3


def test_bulk_reads_return_what_item_by_item_reads_return(store: S3Store) -> None:
    batch = uuid4()
    wanted: list[Any] = []
    for group in range(3):  # three group commits: three objects
        for idx in range(group * 100, group * 100 + 100):
            ref = store.append_response(batch, idx, f'{{"idx":{idx}}}'.encode())
            wanted.append((idx, *ref))
        store.sync()
    wanted.append((300, "responses-1-2-3.seg", 0, 5))  # an object that does not exist
    wanted.append((301, None, None, None))  # no response
    found = store.read_responses(batch, wanted)
    assert [bytes(f) if f is not None else None for f in found] == \
        [store.read_response(batch, w[0], ResponseRef(*w[1:])) if w[1] else None for w in wanted]
    assert found[:300] == [f'{{"idx":{idx}}}'.encode() for idx in range(300)] and found[300:] == [None, None]


def test_a_failed_upload_fails_the_sync_and_is_uploaded_by_the_next_one(own_server: SeaweedFS,
                                                                        tmp_path: Path) -> None:
    store = _store(own_server, tmp_path)
    batch = uuid4()
    before = store.append_response(batch, 0, b'{"n":0}')
    own_server.stop()
    with pytest.raises(PayloadStoreUnavailable, match="cannot upload the responses"):
        store.sync()
    during = store.append_response(batch, 1, b'{"n":1}')
    with pytest.raises(PayloadStoreUnavailable):
        store.sync()  # still down: what the failed sync left is tried first, and fails the sync again
    own_server.start()
    store.sync()
    assert store.read_response(batch, 0, before) == b'{"n":0}' and store.read_response(batch, 1, during) == b'{"n":1}'
    assert len(_keys(store)) == 2


def test_removing_a_batch_removes_its_objects_and_the_listing_names_each_batch(store: S3Store) -> None:
    kept, removed = uuid4(), uuid4()
    for batch in (kept, removed):
        store.write_requests(batch, _bodies(3))
        store.append_response(batch, 0, b"{}")
    store.sync()
    store.uploads.publish(_staged(store, b"line\n"), uuid4())
    assert {batch for batch, _ in store.batches()} == {kept, removed}
    assert store.remove_batch(removed) is True
    assert {key.split("/")[0] for key in _keys(store)} == {str(kept), "files"}
    with pytest.raises(PayloadMissing):
        store.read_request(removed, 0)
    assert store.remove_batch(uuid4()) is True  # nothing there: nothing left


def _staged(store: S3Store, data: bytes) -> Any:
    staged = store.uploads.stage()
    staged.handle.write(data)
    return staged


def test_an_upload_is_published_whole_read_back_and_removed(store: S3Store) -> None:
    file_id, data = uuid4(), b"".join(b'{"custom_id":"%d"}\n' % i for i in range(20000))
    staged = _staged(store, data)
    assert staged.size() == len(data)
    store.uploads.publish(staged, file_id)
    assert not staged.path.exists() and _keys(store) == [f"files/{file_id}"]
    with store.uploads.open(file_id) as handle:
        assert handle.read() == data
    store.uploads.remove(file_id)
    with pytest.raises(FileBytesMissing):
        store.uploads.open(file_id)
    assert not any(Path(store.staging).iterdir())


def test_an_endpoint_that_closes_connections_unanswered_is_a_failure_worth_retrying(tmp_path: Path) -> None:
    """A store behind a proxy that drops connections (botocore raises without a response): a passing failure, never
    a crash of the caller (the packer's thread once died on it)."""
    listener = socket.create_server(("127.0.0.1", 0))
    closing = threading.Event()

    def close_every_connection() -> None:
        while not closing.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=close_every_connection, daemon=True).start()
    try:
        settings = Settings(database_url="postgresql://unused", broker_url="amqp://unused", admin_token="x" * 16,
                            secret_key="x" * 16, payload_backend="s3", s3_bucket="b", s3_region="us-east-1",
                            s3_endpoint_url=f"http://127.0.0.1:{listener.getsockname()[1]}")
        store = S3Store(s3_client(settings, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}), "b", "t/",
                        tmp_path, mode=0o600)
        with pytest.raises(store.failures) as failed:
            store.put_new("t/x", b"body")
        assert status(failed.value) == 0 and passing(failed.value)
    finally:
        closing.set()
        listener.close()
