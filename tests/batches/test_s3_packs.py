"""Packs on a real S3 server (SeaweedFS): a process's small response objects of a batch rewritten as one object with
its index, read back the same; a crash on either side of the pack's upload, a removal during packing, and results
read while their small objects are packed away."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from app.payload_port import ResponseRef
from app.payload_s3 import S3Store
from app.payload_s3_packs import PACK_TAIL, Unpacked
from devtools.seaweedfs import SeaweedFS

WAIT_S = 60  # a bound only a hang crosses


def _store(server: SeaweedFS, staging: Path, prefix: str, *, objects: int = 10_000, idle_s: float = 3600) -> S3Store:
    return S3Store(server.client(), server.bucket, prefix, staging, mode=0o600,
                   unpacked=Unpacked(objects=objects, idle_s=idle_s))


def _keys(store: S3Store, batch: UUID) -> list[str]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket,
                                                                   Prefix=f"{store.prefix}{batch}/")
    return sorted(e["Key"].rsplit("/", 1)[1] for page in pages for e in page.get("Contents", ()))


@pytest.fixture()
def prefix() -> str:
    return f"p-{uuid4().hex[:8]}/"


@pytest.fixture()
def stores(seaweedfs: SeaweedFS, tmp_path: Path, prefix: str) -> Iterator[tuple[S3Store, S3Store]]:
    """A worker's store (packing only when told) and an API's, on one bucket and prefix."""
    worker, api = _store(seaweedfs, tmp_path / "w", prefix), _store(seaweedfs, tmp_path / "a", prefix)
    yield worker, api
    worker.close()
    api.close()


def _group_commits(store: S3Store, batch: UUID, groups: int, per_group: int) -> list[Any]:
    """GROUPS syncs of PER_GROUP responses each (one small object per sync); the wanted items, in idx order."""
    store.write_requests(batch, [b"{}"] * (groups * per_group))
    wanted: list[Any] = []
    for group in range(groups):
        for idx in range(group * per_group, (group + 1) * per_group):
            wanted.append((idx, *store.append_response(batch, idx, b'{"idx":%d}' % idx)))
        store.sync()
    return wanted


def _small(keys: list[str]) -> list[str]:
    return [key for key in keys if key.startswith("responses-")]


def _packs(keys: list[str]) -> list[str]:
    return [key for key in keys if key.startswith("packed-")]


def _expected(wanted: list[Any]) -> list[bytes]:
    return [b'{"idx":%d}' % w[0] for w in wanted]


def _read(store: S3Store, batch: UUID, wanted: list[Any]) -> list[bytes | None]:
    return [None if f is None else bytes(f) for f in store.read_responses(batch, wanted)]


def test_small_objects_are_packed_into_one_and_read_back_the_same(stores: tuple[S3Store, S3Store]) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 30, 7)
    assert len(_keys(worker, batch)) == 31  # the request file and one object per group commit
    assert worker.packer.pack_due(everything=True) == 1
    keys = _keys(worker, batch)
    assert len(keys) == 2 and keys[0].startswith("packed-") and keys[1] == "requests.bin"
    assert _read(api, batch, wanted) == _expected(wanted)
    assert [api.read_response(batch, w[0], ResponseRef(*w[1:])) for w in wanted[::50]] == _expected(wanted[::50])


def test_a_process_packs_by_itself_when_enough_objects_are_held(seaweedfs: SeaweedFS, tmp_path: Path,
                                                                 prefix: str) -> None:
    """Idle packing an hour away: only the count can pack. How many packs depends on how far the packing thread
    lags the uploads (a slow thread packs more at once), never what is left: fewer small objects than the count."""
    worker = _store(seaweedfs, tmp_path, prefix, objects=10)
    batch = uuid4()
    try:
        wanted = _group_commits(worker, batch, 23, 3)
        deadline = time.monotonic() + WAIT_S
        while len(_small(keys := _keys(worker, batch))) >= 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _packs(keys) and len(_small(keys)) < 10 and "requests.bin" in keys, keys
        assert _read(worker, batch, wanted) == _expected(wanted)
    finally:
        worker.close()


def test_a_process_packs_a_batch_by_itself_once_it_goes_idle(seaweedfs: SeaweedFS, tmp_path: Path,
                                                             prefix: str) -> None:
    """Far fewer objects than the count: only the batch's idle time can pack them, into one pack."""
    worker = _store(seaweedfs, tmp_path, prefix, idle_s=0.5)
    batch = uuid4()
    try:
        wanted = _group_commits(worker, batch, 3, 3)
        deadline = time.monotonic() + WAIT_S
        while _small(keys := _keys(worker, batch)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(keys) == 2 and keys[0].startswith("packed-") and keys[1] == "requests.bin", keys
        assert _read(worker, batch, wanted) == _expected(wanted)
    finally:
        worker.close()


def test_results_read_while_their_objects_are_packed_away_come_from_the_pack(
        stores: tuple[S3Store, S3Store]) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 5, 4)
    assert _read(api, batch, wanted) == _expected(wanted)  # the API has seen the batch unpacked
    worker.packer.pack_due(everything=True)  # the small objects it knew are gone now
    assert not _small(_keys(worker, batch))
    assert _read(api, batch, wanted) == _expected(wanted)


def test_a_crash_before_the_pack_is_up_keeps_the_small_objects_and_packs_them_later(
        stores: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 4, 5)
    before = _keys(worker, batch)
    with monkeypatch.context() as patched:
        patched.setattr(worker, "put_new", _refusing)
        assert worker.packer.pack_due(everything=True) == 0
    assert _keys(worker, batch) == before and _read(api, batch, wanted) == _expected(wanted)
    assert worker.packer.pack_due(everything=True) == 1  # what could not be packed is held, packed next time
    assert [key[:7] for key in _keys(worker, batch)] == ["packed-", "request"]


def _refusing(*_args: Any) -> None:
    from botocore.exceptions import EndpointConnectionError

    raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")


def test_a_crash_between_the_pack_and_the_deletes_leaves_both_and_readers_take_the_pack(
        stores: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 4, 5)
    small = _small(_keys(worker, batch))
    with monkeypatch.context() as patched:
        patched.setattr(worker, "delete_keys", _crash)
        with pytest.raises(SystemExit):
            worker.packer.pack_due(everything=True)
    assert len(_keys(worker, batch)) == 6  # the pack, the four small objects it holds, the requests
    for key in small:  # the small objects spoilt: only reads of the pack can return the right bytes
        api.client.put_object(Bucket=api.bucket, Key=api.key(batch, key), Body=b"x" * 40)
    assert _read(api, batch, wanted) == _expected(wanted)
    assert api.remove_batch(batch) is True and _keys(api, batch) == []


def _crash(_keys: list[str]) -> None:
    raise SystemExit("the process dies after the pack's upload")


def test_a_batch_removed_while_it_is_packed_leaves_no_object(stores: tuple[S3Store, S3Store]) -> None:
    worker, api = stores
    first, second = uuid4(), uuid4()
    _group_commits(worker, first, 3, 2)
    _group_commits(worker, second, 3, 2)
    assert api.remove_batch(first) is True  # removed before the pack is written: the pack deletes itself
    listed_once = api.delete_keys

    def pack_between_listing_and_deleting(keys: list[str]) -> None:
        worker.packer.pack_due(everything=True)  # the pack lands after the removal's first listing
        listed_once(keys)

    api.delete_keys = pack_between_listing_and_deleting  # type: ignore[method-assign]
    assert api.remove_batch(second) is True
    assert _keys(api, first) == [] and _keys(api, second) == []


def test_a_pack_whose_index_is_longer_than_one_read_of_its_end_reads_back(stores: tuple[S3Store, S3Store]) -> None:
    worker, api = stores
    batch = uuid4()
    worker.write_requests(batch, [b"{}"])
    parts = [(f"responses-{n:040x}-1-{n}.seg", b'{"n":%d}' % n) for n in range(2000)]
    for name, data in parts:
        worker.put_new(worker.key(batch, name), data)
    worker.packer.pack(batch, parts)
    head = api.client.head_object(Bucket=api.bucket, Key=api.key(batch, _keys(api, batch)[0]))
    assert head["ContentLength"] > 2 * PACK_TAIL  # the index alone is longer than PACK_TAIL
    wanted = [(n, name, 0, len(data)) for n, (name, data) in enumerate(parts)]
    assert _read(api, batch, wanted) == [data for _, data in parts]


def test_a_batch_whose_items_come_slowly_ends_as_one_pack_per_process_read_through_each_replacement(
        seaweedfs: SeaweedFS, tmp_path: Path, prefix: str) -> None:
    worker = _store(seaweedfs, tmp_path / "w", prefix, objects=100, idle_s=0.1)
    api = _store(seaweedfs, tmp_path / "a", prefix)
    batch = uuid4()
    worker.write_requests(batch, [b"{}"] * 6)
    wanted: list[Any] = []
    try:
        for idx in range(6):  # one group commit at a time, each after the last was packed (paced items)
            wanted.append((idx, *worker.append_response(batch, idx, b'{"idx":%d}' % idx)))
            worker.sync()
            deadline = time.monotonic() + WAIT_S
            while idx and _kinds(worker, batch) != ["packed-", "request"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _kinds(worker, batch) == (["packed-", "request"] if idx else ["request", "respons"])
            assert _read(api, batch, wanted) == _expected(wanted)  # its map of the packs is stale each time
    finally:
        worker.close()
        api.close()


def _kinds(store: S3Store, batch: UUID) -> list[str]:
    return [key[:7] for key in _keys(store, batch)]


def test_a_read_across_packed_and_small_objects_gets_each_object_in_one_range(
        stores: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 6, 5)
    worker.packer.pack_due(everything=True)
    for group in range(6, 12):  # packed again (with the first pack), then three small objects left as they are
        wanted += [(idx, *worker.append_response(batch, idx, b'{"idx":%d}' % idx)) for idx in range(5 * group,
                                                                                                    5 * group + 5)]
        worker.sync()
        if group == 8:
            worker.packer.pack_due(everything=True)
    keys = _keys(worker, batch)
    objects = [key for key in keys if key != "requests.bin"]
    assert len(_packs(objects)) >= 1 and len(_small(objects)) == 3
    ranges: list[tuple[str, int, int]] = []
    real_get = api.get
    monkeypatch.setattr(api, "get", lambda key, offset, length: ranges.append((key, offset, length)) or
                        real_get(key, offset, length))

    assert _read(api, batch, wanted[::-1]) == _expected(wanted[::-1])  # any order: each lands at its position
    assert sorted(key.rsplit("/", 1)[1] for key, _, _ in ranges) == objects  # the pack's segments in one range


def test_a_pack_keeps_its_bytes_compressed_and_one_of_the_older_layout_is_still_read(
        stores: tuple[S3Store, S3Store], seaweedfs: SeaweedFS, tmp_path: Path, prefix: str) -> None:
    worker, api = stores
    batch = uuid4()
    wanted = _group_commits(worker, batch, 20, 50)
    smalls = {key: _object(worker, batch, key) for key in _small(_keys(worker, batch))}
    assert worker.packer.pack_due(everything=True) == 1
    pack = _packs(_keys(worker, batch))[0]
    kept = _object(worker, batch, pack)
    assert kept.endswith(b"RLYPACK2") and len(kept) < sum(map(len, smalls.values()))
    assert _read(api, batch, wanted) == _expected(wanted)

    index, raw = {}, b""  # the same small objects packed as before: their bytes as they are, the index, the trailer
    for key, data in smalls.items():
        index[key] = [len(raw), len(data)]
        raw += data
    encoded = json.dumps(index).encode()
    worker.client.put_object(Bucket=worker.bucket, Key=worker.key(batch, pack.replace(".bin", "0.bin")),
                             Body=raw + encoded + struct.pack(">Q8s", len(encoded), b"RLYPACK1"))
    worker.delete_keys([worker.key(batch, pack)])
    reader = _store(seaweedfs, tmp_path / "r", prefix)
    assert _read(reader, batch, wanted) == _expected(wanted)
    reader.close()


def _object(store: S3Store, batch: UUID, name: str) -> bytes:
    return bytes(store.client.get_object(Bucket=store.bucket, Key=store.key(batch, name))["Body"].read())
