"""The S3 store's request file in compressed frames, on a real S3 server (SeaweedFS): any range of the raw bytes
reads back through the frames that hold it (one ranged GET), a block read is one frame, a request file in the
older uncompressed layout is still read, and a damaged frame is a missing payload, never wrong bytes."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest
import zstandard

from app.payload_files import request_file_parts
from app.payload_port import PayloadMissing
from app.payload_s3 import REQUESTS, S3Store
from app.payload_s3_blocks import BLOCK
from app.payload_s3_frames import FRAMED_MAGIC, TAIL, FrameWriter, load_layout
from devtools.seaweedfs import SeaweedFS


def _bodies(count: int, seed: int = 3) -> list[bytes]:
    """COUNT JSON bodies from 2 bytes to ~1.3 MB (longer than a frame, and than the blocks' direct-read bound),
    half random hex and half a repeated phrase: compressible, but not trivially."""
    rng = random.Random(seed)
    found = []
    for i in range(count):
        size = rng.choice((0, 1, 40, 900, 5000, 70_000)) if i % 97 else rng.choice((300_000, 1_300_000))
        text = rng.randbytes(size // 4).hex().encode() + b"lorem ipsum %d " % i * (size // 30)
        found.append(b'{"i":%d,"t":"%s"}' % (i, text) if size else b"{}")
    return found


@pytest.fixture()
def store(seaweedfs: SeaweedFS, tmp_path: Path) -> Iterator[S3Store]:
    found = S3Store(seaweedfs.client(), seaweedfs.bucket, f"f-{uuid4().hex[:8]}/", tmp_path, mode=0o600)
    yield found
    found.close()


def _object(store: S3Store, batch: UUID) -> bytes:
    return bytes(store.client.get_object(Bucket=store.bucket, Key=store.key(batch, REQUESTS))["Body"].read())


def test_a_request_file_is_kept_in_compressed_frames_and_every_item_reads_back(store: S3Store) -> None:
    batch, bodies = uuid4(), _bodies(600)
    store.write_requests(batch, iter(bodies))
    kept = _object(store, batch)
    assert kept.endswith(FRAMED_MAGIC) and len(kept) * 2 < sum(map(len, bodies))  # fewer bytes in the bucket
    assert [store.read_request(batch, idx) for idx in range(len(bodies))] == bodies


def test_any_range_of_the_raw_bytes_reads_back_across_frame_boundaries(store: S3Store) -> None:
    batch, bodies = uuid4(), _bodies(300, seed=5)
    store.write_requests(batch, bodies)
    key, raw = store.key(batch, REQUESTS), b"".join(bodies)
    kept = _object(store, batch)
    reads: list[tuple[int, int]] = []

    def get(start: int, length: int) -> bytes:
        reads.append((start, length))
        return store.get(key, start, length)

    layout = load_layout(kept[-TAIL:], len(kept), get)
    assert list(layout.offsets) == [0, *(sum(map(len, bodies[:i + 1])) for i in range(len(bodies)))]
    frame = BLOCK
    rng = random.Random(11)
    starts = [0, frame - 1, frame, 3 * frame - 5, len(raw) - 7, *(rng.randrange(len(raw)) for _ in range(15))]
    for start in starts:
        for length in (1, 2, 7, frame, frame + 3, 3 * frame + 1, rng.randrange(1, 2 * frame)):
            length = min(length, len(raw) - start)
            reads.clear()
            assert layout.read(get, start, length) == raw[start:start + length], (start, length)
            assert len(reads) == 1  # the frames holding a range are side by side: one ranged GET
    reads.clear()
    assert layout.read(get, 2 * frame, frame) == raw[2 * frame:3 * frame]  # a block is one frame, read alone
    assert layout.frames is not None
    table = layout.frames.table
    assert reads == [(table[2], table[3] - table[2])]


def test_items_read_by_many_threads_get_each_frame_once(store: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neighbouring items share one ranged GET of their frame, however many threads read them."""
    batch = uuid4()
    bodies = [b'{"n":%d,"pad":"%s"}' % (i, b"%d" % (i * 7919) * (i % 300)) for i in range(4000)]
    store.write_requests(batch, bodies)
    gets: list[int] = []
    read = store.get
    monkeypatch.setattr(store, "get", lambda key, offset, length: gets.append(length) or read(key, offset, length))
    found: dict[int, bytes] = {}

    def run(first: int) -> None:
        for idx in range(first, len(bodies), 8):
            found[idx] = store.read_request(batch, idx)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [found[idx] for idx in range(len(bodies))] == bodies
    frames = -(-sum(map(len, bodies)) // BLOCK)
    assert len(gets) == frames + 1  # each frame once, and the frame table with the offsets (the trailer apart)


@pytest.mark.parametrize("count", [0, 1, 500])
def test_a_request_file_in_the_older_uncompressed_layout_is_still_read(store: S3Store, count: int) -> None:
    batch, bodies = uuid4(), _bodies(count, seed=9)
    old = b"".join(bytes(buffer) for buffers, _ in request_file_parts(bodies) for buffer in buffers)
    store.client.put_object(Bucket=store.bucket, Key=store.key(batch, REQUESTS), Body=old)
    assert [store.read_request(batch, idx) for idx in range(count)] == bodies
    with pytest.raises(PayloadMissing):
        store.read_request(batch, count)


def test_a_damaged_frame_or_trailer_is_a_missing_payload_never_wrong_bytes(store: S3Store) -> None:
    bodies = [b'{"n":%d,"t":"%s"}' % (i, b"word%d " % i * 40) for i in range(3000)]
    batch = uuid4()
    store.write_requests(batch, bodies)
    kept = bytearray(_object(store, batch))
    kept[100] ^= 0xFF  # inside the first frame
    damaged = uuid4()
    store.client.put_object(Bucket=store.bucket, Key=store.key(damaged, REQUESTS), Body=bytes(kept))
    with pytest.raises(PayloadMissing, match="frame 0"):
        store.read_request(damaged, 0)
    assert store.read_request(damaged, 2999) == bodies[2999]  # the other frames are whole
    cut = uuid4()
    store.client.put_object(Bucket=store.bucket, Key=store.key(cut, REQUESTS), Body=bytes(kept[:-3]))
    with pytest.raises(PayloadMissing, match="incomplete"):
        store.read_request(cut, 0)


def test_the_frame_writer_cuts_frames_of_its_size_whatever_the_writes() -> None:
    out: list[bytes] = []
    writer = FrameWriter(lambda buffers: out.extend(buffers), frame=1000)
    raw = bytes(random.Random(1).randbytes(5500))
    for at in range(0, len(raw), 333):
        writer.write([raw[at:at + 333]])
    frames = writer.close()
    assert [len(zstandard.decompress(part)) for part in out] == [1000] * 5 + [500]
    assert list(frames.table) == [0, *(sum(map(len, out[:i + 1])) for i in range(len(out)))]
    joined = b"".join(out)
    assert frames.read(lambda start, length: joined[start:start + length], 990, 1020) == raw[990:2010]
