"""The S3 store's response spool (app/payload_s3_spool.py) on the real Postgres and a real S3 server (SeaweedFS):
a sync is one row per batch and no object; the rows are read back until packed, then deleted; the bucket down at a
sync loses nothing; Postgres away at a sync is raised as such and what it held is kept for the next; a dead
process's rows are packed by another; removal deletes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from app.batches.store import SEGMENT
from app.db import create_pool
from app.payload_port import ResponseRef
from app.payload_s3 import S3Store
from app.payload_s3_packs import Unpacked
from app.payload_s3_spool import Spool
from app.payloads import FolderStore
from app.runtime import Runtime
from devtools.seaweedfs import SeaweedFS, start_seaweedfs
from tests.batches.helpers import CHAT, run_in_process, submit


def _store(server: SeaweedFS, staging: Path, prefix: str, spool: Spool) -> S3Store:
    """A store that packs only when told (count and idle time out of reach)."""
    return S3Store(server.client(), server.bucket, prefix, staging, mode=0o600, spool=spool,
                   unpacked=Unpacked(objects=10_000, idle_s=3600))


def _keys(store: S3Store, batch: UUID) -> list[str]:
    return sorted(key.rsplit("/", 1)[1] for key, _ in store.list_keys(f"{store.prefix}{batch}/"))


def _rows(runtime: Runtime, batch: UUID) -> list[str]:
    with runtime.pool.connection() as conn:
        return [r["name"] for r in conn.execute("SELECT name FROM payload_spool WHERE batch_id = %s ORDER BY name",
                                                (batch,)).fetchall()]


def _commit(store: S3Store, batch: UUID, idxs: range) -> list[Any]:
    """The responses of IDXS kept and synced (one group commit); the wanted items."""
    wanted = [(idx, *store.append_response(batch, idx, b'{"idx":%d}' % idx)) for idx in idxs]
    store.sync()
    return wanted


def _expected(wanted: list[Any]) -> list[bytes]:
    return [b'{"idx":%d}' % w[0] for w in wanted]


def _read(store: S3Store, batch: UUID, wanted: list[Any]) -> list[bytes | None]:
    return [None if f is None else bytes(f) for f in store.read_responses(batch, wanted)]


@pytest.fixture()
def prefix() -> str:
    return f"s-{uuid4().hex[:8]}/"


@pytest.fixture()
def stores(seaweedfs: SeaweedFS, tmp_path: Path, prefix: str, runtime: Runtime) -> Iterator[tuple[S3Store, S3Store]]:
    """A worker's store and an API's, on one bucket, prefix and database."""
    spool = Spool(lambda: runtime.pool)
    worker, api = _store(seaweedfs, tmp_path / "w", prefix, spool), _store(seaweedfs, tmp_path / "a", prefix, spool)
    yield worker, api
    worker.close()
    api.close()


def test_a_sync_is_one_row_per_batch_and_no_object_and_reads_back_until_packed(
        stores: tuple[S3Store, S3Store], runtime: Runtime) -> None:
    worker, api = stores
    first, second = uuid4(), uuid4()
    for batch in (first, second):
        worker.write_requests(batch, [b"{}"] * 20)
    wanted = {first: _commit(worker, first, range(0, 5)), second: []}
    wanted[second] = [(idx, *worker.append_response(second, idx, b'{"idx":%d}' % idx)) for idx in range(3)]
    wanted[first] += _commit(worker, first, range(5, 9))  # the second batch's three go in this sync too
    assert len(_rows(runtime, first)) == 2 and len(_rows(runtime, second)) == 1
    assert _keys(worker, first) == ["requests.bin"] and _keys(worker, second) == ["requests.bin"]
    for batch in (first, second):
        assert _read(api, batch, wanted[batch]) == _expected(wanted[batch])

    assert worker.packer.pack_due(everything=True) == 2
    assert _rows(runtime, first) == [] and _rows(runtime, second) == []
    for batch in (first, second):
        keys = _keys(worker, batch)
        assert len(keys) == 2 and keys[0].startswith("packed-"), keys
        assert _read(api, batch, wanted[batch]) == _expected(wanted[batch])  # the API knew no pack: it looks again


def test_the_bucket_down_at_a_sync_loses_nothing_and_the_rows_are_packed_once_it_is_back(
        tmp_path: Path, prefix: str, runtime: Runtime) -> None:
    server = start_seaweedfs()
    worker = _store(server, tmp_path, prefix, Spool(lambda: runtime.pool))
    try:
        batch = uuid4()
        worker.write_requests(batch, [b"{}"] * 10)
        server.stop()
        wanted = _commit(worker, batch, range(0, 4)) + _commit(worker, batch, range(4, 10))  # no failure
        assert len(_rows(runtime, batch)) == 2
        assert _read(worker, batch, wanted) == _expected(wanted)  # from the spool, the bucket still down
        assert worker.packer.pack_due(everything=True) == 0  # held, packed once the bucket is back
        assert len(_rows(runtime, batch)) == 2
        server.start()
        assert worker.packer.pack_due(everything=True) == 1
        assert _rows(runtime, batch) == [] and len(_keys(worker, batch)) == 2
        assert _read(worker, batch, wanted) == _expected(wanted)
    finally:
        worker.close()
        server.close()


def test_postgres_away_at_a_sync_is_raised_as_such_and_what_it_held_goes_in_the_next(
        seaweedfs: SeaweedFS, tmp_path: Path, prefix: str, runtime: Runtime) -> None:
    """The group writer waits for a database that is away (app/usage/writer.py): the sync raises psycopg's
    OperationalError itself, never PayloadStoreUnavailable (which would commit the items without their answers)."""
    closed = create_pool(runtime.settings.database_url, min_size=1, max_size=1)
    closed.close()
    pools = [closed]
    worker = _store(seaweedfs, tmp_path, prefix, Spool(lambda: pools[0]))
    try:
        batch = uuid4()
        worker.write_requests(batch, [b"{}"] * 10)
        held = [(idx, *worker.append_response(batch, idx, b'{"idx":%d}' % idx)) for idx in range(4)]
        with pytest.raises(psycopg.OperationalError):
            worker.sync()
        assert _rows(runtime, batch) == []
        pools[0] = runtime.pool  # the database is back
        wanted = held + _commit(worker, batch, range(4, 10))
        assert len(_rows(runtime, batch)) == 2  # the held segment first, then the new one
        assert _read(worker, batch, wanted) == _expected(wanted)
    finally:
        pools[0] = runtime.pool
        worker.close()


def test_a_group_commit_while_postgres_is_away_waits_for_it_and_keeps_the_answer(
        client: Any, key: str, seaweedfs: SeaweedFS, tmp_path: Path, prefix: str, runtime: Runtime) -> None:
    """The worker's own code in this process: the first spool write meets a closed pool (the database away), the
    group writer waits and tries again, and the item completes with its response kept (not discarded)."""
    batch_id = UUID(submit(client, key, [CHAT]).json["id"])
    closed = create_pool(runtime.settings.database_url, min_size=1, max_size=1)
    closed.close()
    calls: list[int] = []

    def pool_of() -> Any:
        calls.append(1)
        return closed if len(calls) == 1 else runtime.pool

    store = _store(seaweedfs, tmp_path, prefix, Spool(pool_of))
    try:
        store.write_requests(batch_id, [FolderStore(runtime.settings.batch_payload_dir).read_request(batch_id, 0)])
        assert run_in_process(runtime, str(batch_id), 1, store) == ["completed"]
        assert len(calls) >= 2  # the closed pool met, then the database back
        with runtime.pool.connection() as conn:
            row = conn.execute(f"SELECT {SEGMENT}, response_offset, response_length FROM batch_items"
                               " WHERE batch_id = %s", (batch_id,)).fetchone()
        assert row is not None
        found = store.read_response(batch_id, 0, ResponseRef(row["response_segment"], row["response_offset"],
                                                             row["response_length"]))
        assert found is not None and b'"chat.completion"' in found
    finally:
        store.close()


def test_a_dead_processs_rows_are_packed_by_another_once_orphans(
        seaweedfs: SeaweedFS, tmp_path: Path, prefix: str, runtime: Runtime) -> None:
    dead = _store(seaweedfs, tmp_path / "dead", prefix, Spool(lambda: runtime.pool))
    batch, removed = uuid4(), uuid4()
    for each in (batch, removed):
        dead.write_requests(each, [b"{}"] * 10)
    wanted = _commit(dead, batch, range(0, 6)) + _commit(dead, batch, range(6, 10))
    _commit(dead, removed, range(0, 3))
    dead.client.delete_object(Bucket=dead.bucket, Key=dead.key(removed, "requests.bin"))  # its batch removed
    # the process dies here: nothing of it runs again (its held bytes are gone with it)

    young = _store(seaweedfs, tmp_path / "young", prefix, Spool(lambda: runtime.pool))
    young.packer.adopt()
    assert len(_rows(runtime, batch)) == 2  # the rows may still be their process's: not adopted yet
    other = _store(seaweedfs, tmp_path / "other", prefix, Spool(lambda: runtime.pool, orphan_age_s=0))
    try:
        assert other.packer.adopt() >= 3  # the rows of other tests' batches may be adopted too
        assert _rows(runtime, batch) == [] and _rows(runtime, removed) == []
        keys = _keys(other, batch)
        assert len(keys) == 2 and keys[0].startswith("packed-"), keys
        assert _keys(other, removed) == []  # a pack of a removed batch deletes itself
        assert _read(young, batch, wanted) == _expected(wanted)
    finally:
        for store in (young, other):
            store.close()


def test_removing_a_batch_deletes_its_rows_and_the_listing_names_a_batch_with_rows_only(
        stores: tuple[S3Store, S3Store], runtime: Runtime) -> None:
    worker, api = stores
    batch = uuid4()
    worker.write_requests(batch, [b"{}"] * 4)
    _commit(worker, batch, range(4))
    worker.client.delete_object(Bucket=worker.bucket, Key=worker.key(batch, "requests.bin"))
    assert batch in dict(api.batches())  # its row alone: still listed, so that a purge finds it
    assert api.remove_batch(batch) is True
    assert _rows(runtime, batch) == [] and batch not in dict(api.batches())
