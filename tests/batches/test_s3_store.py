"""The S3 payload backend on a real S3 server (SeaweedFS, which checks signatures, ranges, multipart uploads and
If-None-Match): the layout, whole-or-nothing writes, one object per sync, reads by byte range, failed uploads kept
and retried, removal and listing, uploads."""

from __future__ import annotations

import base64
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from app.payload_port import FileBytesMissing, PayloadMissing, PayloadStoreUnavailable, ResponseRef
from app.payload_s3 import S3Store
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


def _open_uploads(store: S3Store) -> list[dict[str, Any]]:
    """The multipart uploads begun under the store's prefix and neither completed nor aborted."""
    listed = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix)
    return list(listed.get("Uploads", ()))


def _staged_files(store: S3Store) -> list[Path]:
    return list(Path(store.staging).iterdir()) if Path(store.staging).exists() else []


def _big_bodies(count: int) -> list[bytes]:
    """COUNT bodies of about 12 kB that compress to about 9 kB (random bytes in base64: the request file is
    compressed), each with its own index (8 MiB parts: about 920 bodies a part)."""
    return [b'{"n":%d,"pad":"' % i + base64.b64encode(random.Random(i).randbytes(9000)) + b'"}'
            for i in range(count)]


def _wait_for(what: Any, timeout: float = 60.0) -> Any:
    """WHAT() once it is truthy, polled (the bound is one only a hang crosses)."""
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.05)
    return found


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
    assert not _staged_files(store)  # nothing is staged on the local disk


def test_a_large_request_file_streams_into_a_multipart_upload_while_its_bodies_are_produced(store: S3Store) -> None:
    batch, bodies = uuid4(), _big_bodies(2400)  # ~21.6 MB compressed: 3 parts
    seen_parts: list[int] = []

    def produced() -> Iterator[bytes]:
        for idx, body in enumerate(bodies):
            if idx == 1200:  # more than a part made: it is going up while the rest is still to come
                upload = _wait_for(lambda: _open_uploads(store))[0]
                parts = _wait_for(lambda: store.client.list_parts(Bucket=store.bucket, Key=upload["Key"],
                                                                  UploadId=upload["UploadId"]).get("Parts"))
                seen_parts.append(len(parts))
                assert _keys(store) == []  # nothing visible before the upload completes
            yield body

    store.write_requests(batch, produced())
    assert seen_parts and seen_parts[0] >= 1
    head = store.client.head_object(Bucket=store.bucket, Key=store.key(batch, "requests.bin"))
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload's ETag names its parts
    assert [store.read_request(batch, idx) for idx in range(len(bodies))] == bodies  # each at its offset
    assert _open_uploads(store) == [] and not _staged_files(store)


def test_a_small_request_file_is_one_put(store: S3Store) -> None:
    batch = uuid4()
    store.write_requests(batch, _bodies(500))
    head = store.client.head_object(Bucket=store.bucket, Key=store.key(batch, "requests.bin"))
    assert "-" not in head["ETag"] and _open_uploads(store) == []


def test_an_abandoned_or_failing_write_leaves_nothing(store: S3Store) -> None:
    def failing() -> Iterator[bytes]:
        yield from _bodies(2000)
        raise OSError(28, "No space left on device")

    batch = uuid4()
    with pytest.raises(PayloadStoreUnavailable, match="No space left on device"):
        store.write_requests(batch, failing())
    with pytest.raises(PayloadStoreUnavailable, match="abandoned"):
        store.write_requests(batch, _bodies(3000), lambda: True)
    assert _keys(store) == [] and not _staged_files(store)


@pytest.mark.parametrize("how", ["validation fails", "the bodies fail", "abandoned at the end"])
def test_a_write_given_up_after_parts_went_up_leaves_no_object_and_no_open_upload(store: S3Store, how: str) -> None:
    """What create_batch does when an item fails validation midway (it stops the writer: ABANDONED answers True),
    or when reading the bodies fails, once some parts are in the bucket: the multipart upload is aborted."""
    stop = threading.Event()
    bodies = _big_bodies(3000)

    def produced() -> Iterator[bytes]:
        for idx, body in enumerate(bodies):
            if idx == 2000:  # two parts made: at least one uploaded before the write is given up
                _wait_for(lambda: _open_uploads(store))
                if how == "the bodies fail":
                    raise OSError(5, "Input/output error")
                if how == "validation fails":
                    stop.set()
            yield body
        if how == "abandoned at the end":
            stop.set()

    with pytest.raises(PayloadStoreUnavailable, match=r"abandoned|Input/output error"):
        store.write_requests(uuid4(), produced(), stop.is_set)
    assert _keys(store) == [] and _open_uploads(store) == []


def test_a_multipart_upload_refused_midway_is_unavailable_and_leaves_nothing(store: S3Store) -> None:
    """The store refuses a part (the upload was aborted behind the writer's back: 404 NoSuchUpload): the write
    fails at once, with no object left."""
    bodies = _big_bodies(4000)

    def produced() -> Iterator[bytes]:
        for idx, body in enumerate(bodies):
            if idx == 2000:  # a part made (bodies are taken 1,024 at a time): the upload is begun
                upload = _wait_for(lambda: _open_uploads(store))[0]
                store.client.abort_multipart_upload(Bucket=store.bucket, Key=upload["Key"],
                                                    UploadId=upload["UploadId"])
            yield body

    with pytest.raises(PayloadStoreUnavailable, match="cannot write the batch's request file"):
        store.write_requests(uuid4(), produced())
    assert _keys(store) == [] and _open_uploads(store) == []


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
    assert not _staged_files(store)


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
