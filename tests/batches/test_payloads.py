"""The payload store on a real filesystem (no services): few files per batch, whole-or-nothing writes, durable
appends, private modes, the older layout still read."""

from __future__ import annotations

import os
import random
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest

import app.payloads as payloads_module
from app import payload_files
from app.payloads import FolderStore, PayloadMissing, PayloadStoreUnavailable, ResponseRef


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[FolderStore]:
    found = FolderStore(tmp_path / "payloads")
    yield found
    found.close()


def _bodies(count: int) -> list[bytes]:
    return [f'{{"model":"m","messages":[{{"role":"user","content":"item {i} {"é" * (i % 5)}"}}]}}'.encode()
            for i in range(count)]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_batch_of_requests_is_one_file_and_each_item_reads_back_exactly(store: FolderStore) -> None:
    batch, bodies = uuid4(), _bodies(1000)
    store.write_requests(batch, iter(bodies))
    assert _files(store.root) == [f"{batch}/requests.bin"]
    assert [store.read_request(batch, idx) for idx in range(1000)] == bodies
    for idx in (-1, 1000):
        with pytest.raises(PayloadMissing):
            store.read_request(batch, idx)


def test_a_list_of_bodies_is_written_in_slices_with_the_same_layout(store: FolderStore, monkeypatch) -> None:
    gather = payload_files._GATHER
    bodies = _bodies(2 * gather + 452)  # three gathered writes, a slice of the list each, then the index and trailer
    writes: list[int] = []
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, buffers: writes.append(len(buffers)) or real(fd, buffers))
    listed, iterated = uuid4(), uuid4()
    store.write_requests(listed, bodies)
    assert writes == [gather, gather, 452, 2]
    store.write_requests(iterated, iter(bodies))
    assert [store.read_request(listed, idx) for idx in range(len(bodies))] == bodies
    assert (store.batch_dir(listed) / "requests.bin").read_bytes() == \
        (store.batch_dir(iterated) / "requests.bin").read_bytes()


def test_an_abandoned_write_stops_between_writes_and_leaves_nothing(store: FolderStore) -> None:
    asked = 0

    def abandoned() -> bool:
        nonlocal asked
        asked += 1
        return asked == 2  # after the first gathered write

    batch = uuid4()
    with pytest.raises(PayloadStoreUnavailable, match="abandoned"):
        store.write_requests(batch, _bodies(3000), abandoned)
    assert asked == 2 and _files(store.root) == [] and not store.batch_dir(batch).exists()


def test_files_and_folders_are_private_by_default_whatever_the_umask(store: FolderStore) -> None:
    old = os.umask(0)
    try:
        batch = uuid4()
        store.write_requests(batch, [b"{}"])
        store.append_response(batch, 0, b"{}")
    finally:
        os.umask(old)
    modes = {str(p.relative_to(store.root)): stat.S_IMODE(p.stat().st_mode) for p in store.root.rglob("*")}
    assert set(modes.values()) == {0o600, 0o700}
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert all(mode == 0o600 for name, mode in modes.items() if name.endswith((".bin", ".seg")))


def test_an_operator_chosen_mode_applies_to_files_and_gives_folders_the_matching_search_bits(tmp_path: Path) -> None:
    shared = FolderStore(tmp_path / "shared", mode=0o640)
    batch = uuid4()
    shared.write_requests(batch, [b"{}"])
    shared.append_response(batch, 0, b"{}")
    folder = shared.batch_dir(batch)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o640}
    shared.close()


def test_a_write_cut_midway_leaves_nothing_visible_and_no_staging_leftover(store: FolderStore) -> None:
    def failing() -> Iterator[bytes]:
        yield from _bodies(2000)  # several gathered writes reach the file before the failure
        raise OSError(28, "No space left on device")

    batch = uuid4()
    with pytest.raises(PayloadStoreUnavailable, match="No space left on device"):
        store.write_requests(batch, failing())
    assert _files(store.root) == [] and not store.batch_dir(batch).exists()
    with pytest.raises(PayloadMissing):
        store.read_request(batch, 0)


def test_a_short_gathered_write_is_finished_from_where_it_stopped(store: FolderStore, monkeypatch) -> None:
    real = os.writev

    def short(fd: int, buffers: list[bytes]) -> int:
        monkeypatch.setattr(os, "writev", real)
        return os.write(fd, b"".join(buffers)[:1234])

    monkeypatch.setattr(os, "writev", short)
    batch, bodies = uuid4(), _bodies(100)
    store.write_requests(batch, bodies)
    assert [store.read_request(batch, idx) for idx in range(100)] == bodies


def test_a_request_file_cut_short_is_missing_rather_than_misread(store: FolderStore) -> None:
    batch = uuid4()
    store.write_requests(batch, _bodies(10))
    path = store.batch_dir(batch) / "requests.bin"
    os.truncate(path, path.stat().st_size - 3)
    with pytest.raises(PayloadMissing, match="incomplete"):
        store.read_request(batch, 0)


def test_batches_stored_in_the_older_layout_stay_readable(store: FolderStore) -> None:
    batch = uuid4()
    folder = store.batch_dir(batch)
    folder.mkdir(parents=True)
    (folder / "0.request.json").write_bytes(b'{"model":"old"}')
    (folder / "0.response.json").write_bytes(b'{"id":"old"}\n')
    assert store.read_request(batch, 0) == b'{"model":"old"}'
    assert store.read_response(batch, 0, None) == b'{"id":"old"}'
    assert store.read_responses(batch, [(0, None, None, None), (1, None, None, None)]) == [b'{"id":"old"}', None]
    with pytest.raises(PayloadMissing):
        store.read_request(batch, 1)


def test_responses_appended_by_many_threads_land_in_one_segment_and_read_back_by_ref(store: FolderStore) -> None:
    batch = uuid4()
    store.write_requests(batch, [b"{}"])
    refs: dict[int, ResponseRef] = {}

    def worker(first: int) -> None:
        for idx in range(first, first + 200):
            refs[idx] = store.append_response(batch, idx, b'{"answer":%d}' % idx)
            if idx % 7 == 0:
                store.sync()

    threads = [threading.Thread(target=worker, args=(n * 200,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.sync()
    assert len({ref.segment for ref in refs.values()}) == 1
    assert len(_files(store.root)) == 2  # the request file and this process's segment
    assert all(store.read_response(batch, idx, ref) == b'{"answer":%d}' % idx for idx, ref in refs.items())


def test_sync_makes_each_segment_written_to_durable_with_one_fdatasync(store: FolderStore, monkeypatch) -> None:
    first, second = uuid4(), uuid4()
    for batch in (first, second):
        store.write_requests(batch, [b"{}"])
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    for idx in range(5):
        store.append_response(first, idx, b"{}")
    store.append_response(second, 0, b"{}")
    store.sync()
    assert len(synced) == 2
    store.sync()
    assert len(synced) == 2  # nothing new: nothing to sync


def test_a_failed_sync_fails_later_syncs_too_and_new_appends_go_to_a_new_segment(store: FolderStore,
                                                                              monkeypatch) -> None:
    batch = uuid4()
    store.write_requests(batch, [b"{}"])
    before = store.append_response(batch, 0, b'{"n":0}')
    real = os.fdatasync

    def fail_once(fd: int) -> None:
        monkeypatch.setattr(os, "fdatasync", real)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fail_once)
    with pytest.raises(PayloadStoreUnavailable, match="Input/output error"):
        store.sync()
    with pytest.raises(PayloadStoreUnavailable):  # another thread's appends to it are just as uncertain
        store.sync()
    after = store.append_response(batch, 1, b'{"n":1}')
    assert after.segment != before.segment
    monkeypatch.setattr(payload_files, "SYNC_FAILURE_HOLD_S", 0.0)  # the hold is over: syncs work again
    store.sync()
    assert store.read_response(batch, 1, after) == b'{"n":1}'


def test_appending_for_a_batch_this_replica_cannot_see_raises_unavailable(store: FolderStore) -> None:
    with pytest.raises(PayloadStoreUnavailable, match="No such file or directory"):
        store.append_response(uuid4(), 0, b"{}")
    assert not store.root.exists() or _files(store.root) == []  # no folder is made up for it


def test_a_response_this_replica_cannot_see_is_none(store: FolderStore, tmp_path: Path) -> None:
    batch = uuid4()
    store.write_requests(batch, [b"{}"])
    ref = store.append_response(batch, 0, b'{"ok":true}')
    store.sync()
    (tmp_path / "secret.seg").write_bytes(b"secret")
    elsewhere = FolderStore(tmp_path / "elsewhere")
    assert elsewhere.read_response(batch, 0, ref) is None
    for bad in (ResponseRef("../../secret.seg", 0, 6), ResponseRef(ref.segment, ref.offset, ref.length + 1),
                ResponseRef(ref.segment, -1, 2), ResponseRef("responses-1-2-0.seg", 0, 1)):
        assert store.read_response(batch, 0, bad) is None
    assert store.read_responses(batch, [(0, *ref), (1, ref.segment, 10_000, 5)]) == [b'{"ok":true}', None]


def test_bulk_reads_return_what_item_by_item_reads_return(store: FolderStore) -> None:
    batch = uuid4()
    store.write_requests(batch, [b"{}"])
    others = [FolderStore(store.root) for _ in range(2)]  # three processes' segments
    rng = random.Random(7)
    items = []
    for idx in range(3000):
        writer = rng.choice([store, *others])
        body = b'{"i":%d,"pad":"%s"}' % (idx, b"x" * rng.randrange(0, 300))
        items.append((idx, writer.append_response(batch, idx, body)))
    for writer in [store, *others]:
        writer.sync()
    rng.shuffle(items)
    bulk = store.read_responses(batch, [(idx, *ref) for idx, ref in items])
    assert [bytes(b) if b is not None else None for b in bulk] == [store.read_response(batch, i, r) for i, r in items]
    assert len({ref.segment for _, ref in items}) == 3
    for writer in others:
        writer.close()


def test_a_segment_closed_for_room_is_reopened_and_appended_to(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(payloads_module, "_OPEN_SEGMENTS", 1)
    small = FolderStore(tmp_path / "small")
    first, second = uuid4(), uuid4()
    for batch in (first, second):
        small.write_requests(batch, [b"{}"])
    a = small.append_response(first, 0, b'{"a":0}')
    small.sync()
    small.append_response(second, 0, b'{"b":0}')  # closes first's clean segment
    again = small.append_response(first, 1, b'{"a":1}')
    small.sync()
    assert again.segment == a.segment and again.offset == a.offset + a.length
    assert small.read_response(first, 1, again) == b'{"a":1}'
    small.close()


def test_removing_a_batch_removes_its_folder_and_staging_leftover(store: FolderStore) -> None:
    batch = uuid4()
    store.write_requests(batch, _bodies(3))
    assert store.read_request(batch, 0)  # its descriptor is now cached
    store.append_response(batch, 0, b"{}")
    leftover = store.root / ".staging" / str(batch)
    leftover.mkdir()
    assert {found for found, _ in store.batches()} == {batch}
    assert store.remove_batch(batch) is True
    assert _files(store.root) == [] and not leftover.exists()
    with pytest.raises(PayloadMissing):
        store.read_request(batch, 0)


def test_the_batches_listed_are_the_batch_folders_only(store: FolderStore) -> None:
    store.write_requests(UUID(int=1), [b"{}"])
    (store.root / "lost+found").mkdir()
    assert [found for found, _ in store.batches()] == [UUID(int=1)]
