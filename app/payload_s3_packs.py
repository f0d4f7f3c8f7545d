"""Packs: a worker process's small response objects of a batch, rewritten as one large object (the S3 store's
compaction). A group commit uploads one small immutable object per batch (durable before the items' final states
commit); at most every PACK_OBJECTS of them, and when a batch has had no upload for PACK_IDLE_S (it ended, or this
process has no more of its items), the process writes the bytes it still holds for them as one `packed-...bin`
object with its index (each small object's name, offset and length in the pack) at its end, then deletes the small
ones. The pack and its index are one PUT, so there is nothing to commit between them: a crash before the PUT
completes leaves the small objects; a crash after it leaves both, equal bytes, and readers prefer the pack. A
reader maps a reference's small object to its pack (a listing of the batch's packs and their indexes, cached), and
when a small object is gone (packed meanwhile) looks for the packs again.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from uuid import UUID

from app.payload_s3_client import Bucket

PACK_PREFIX = "packed-"
PACK_OBJECTS = 512  # small objects of a batch a process packs at once, at most
PACK_BYTES = 32 << 20  # ... or as many as hold this many bytes
PACK_IDLE_S = 2.0  # a batch without an upload for this long has what is left packed
PACK_TAIL = 64 << 10  # bytes of a pack's end read to find its index (more when the index is longer)
_MAGIC = b"RLYPACK1"
_TRAILER = struct.Struct(">Q8s")  # the index's length, the magic


class PackMalformed(ValueError):
    """An object named as a pack whose end is no pack index."""


def encode_pack(parts: list[tuple[str, bytes]]) -> bytes:
    """PARTS (small object name, its bytes) as one pack: the bytes, the index (JSON), the trailer."""
    index: dict[str, list[int]] = {}
    out = bytearray()
    for name, data in parts:
        index[name] = [len(out), len(data)]
        out += data
    encoded = json.dumps(index, separators=(",", ":")).encode()
    return bytes(out + encoded + _TRAILER.pack(len(encoded), _MAGIC))


def index_length(tail: bytes) -> int:
    """How many bytes before the trailer the index of the pack ending in TAIL takes."""
    if len(tail) < _TRAILER.size:
        raise PackMalformed("shorter than its trailer")
    length, magic = _TRAILER.unpack(tail[-_TRAILER.size:])
    if magic != _MAGIC:
        raise PackMalformed("no pack trailer")
    return int(length)


def parse_index(tail: bytes) -> dict[str, tuple[int, int]]:
    """The index (small object name → offset, length in the pack) at the end of TAIL, a pack's last bytes."""
    length = index_length(tail)
    if length + _TRAILER.size > len(tail):
        raise PackMalformed("index longer than the bytes read")
    raw = json.loads(tail[len(tail) - _TRAILER.size - length:len(tail) - _TRAILER.size])
    return {str(name): (int(at[0]), int(at[1])) for name, at in raw.items()}


@dataclass
class _Unpacked:
    """The small objects of one batch this process uploaded and has not packed yet, with their bytes."""

    parts: list[tuple[str, bytes]] = field(default_factory=list)
    size: int = 0
    last: float = 0.0


class Unpacked:
    """Every batch's unpacked small objects of this process; what is due for packing."""

    def __init__(self, *, objects: int = PACK_OBJECTS, idle_s: float = PACK_IDLE_S) -> None:
        self.objects, self.idle_s = objects, idle_s
        self._lock = threading.Lock()
        self._batches: dict[UUID, _Unpacked] = {}

    def add(self, batch_id: UUID, name: str, data: bytes) -> bool:
        """Remember an uploaded small object; whether its batch is due for packing now (enough of them)."""
        with self._lock:
            held = self._batches.setdefault(batch_id, _Unpacked())
            held.parts.append((name, data))
            held.size += len(data)
            held.last = time.monotonic()
            return len(held.parts) >= self.objects or held.size >= PACK_BYTES

    def due(self, *, everything: bool = False) -> list[tuple[UUID, list[tuple[str, bytes]]]]:
        """Take the batches due: PACK_OBJECTS of them (or PACK_BYTES), idle ones, or EVERYTHING (two objects or more
        each: one alone is left as it is)."""
        now, taken = time.monotonic(), []
        with self._lock:
            for batch_id, held in list(self._batches.items()):
                full = len(held.parts) >= self.objects or held.size >= PACK_BYTES
                if full or everything or now - held.last >= self.idle_s:
                    del self._batches[batch_id]
                    if len(held.parts) > 1:
                        taken.append((batch_id, held.parts))
        return taken

    def give_back(self, batch_id: UUID, parts: list[tuple[str, bytes]]) -> None:
        """PARTS of a pack that could not be written: packed again later."""
        with self._lock:
            held = self._batches.setdefault(batch_id, _Unpacked())
            held.parts[:0] = parts
            held.size += sum(len(data) for _, data in parts)
            held.last = time.monotonic()

    def forget(self, batch_id: UUID) -> None:
        with self._lock:
            self._batches.pop(batch_id, None)

    def waiting(self) -> bool:
        with self._lock:
            return bool(self._batches)


@dataclass
class PackMap:
    """What a reader knows of a batch's packs: the packs read, and where each packed small object now is."""

    packs: set[str] = field(default_factory=set)
    where: dict[str, tuple[str, int]] = field(default_factory=dict)  # small object → (pack, its offset there)

    def learn(self, pack: str, index: dict[str, tuple[int, int]]) -> None:
        self.packs.add(pack)
        for name, (offset, _length) in index.items():
            self.where.setdefault(name, (pack, offset))


class Packer:
    """A process's packing of its small objects, on a thread of its own (made again in a forked child): a batch's
    are packed when PACK_OBJECTS are held, when it had no upload for the idle time, and all of them at close."""

    def __init__(self, store: Bucket, unpacked: Unpacked) -> None:
        self.store, self.unpacked = store, unpacked
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._closed = False

    def uploaded(self, batch_id: UUID, name: str, data: bytes) -> None:
        """A small object of BATCH_ID is in the bucket: held until packed."""
        if self.unpacked.add(batch_id, name, data):
            self._wake.set()
        if self._thread is None or self._pid != os.getpid():
            self._pid, self._closed = os.getpid(), False
            self._thread = threading.Thread(target=self._run, name="relay-s3-pack", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.unpacked.idle_s / 2)
            self._wake.clear()
            self.pack_due()

    def pack_due(self, *, everything: bool = False) -> int:
        """Pack the batches due (EVERYTHING: all held); how many packs were written."""
        written = 0
        for batch_id, parts in self.unpacked.due(everything=everything):
            try:
                self.pack(batch_id, parts)
                written += 1
            except self.store.failures:
                self.unpacked.give_back(batch_id, parts)  # the store down: packed when it is back
        return written

    def pack(self, batch_id: UUID, parts: list[tuple[str, bytes]]) -> str:
        """Write PARTS of BATCH_ID as one pack, then delete them; the pack's name. A pack of a batch removed
        meanwhile (its request file gone) is deleted again rather than outlive it."""
        name = self.store.object_name(PACK_PREFIX, "bin")
        key = self.store.key(batch_id, name)
        self.store.put_new(key, encode_pack(parts))
        if self.store.removed(batch_id):
            self.store.delete_keys([key])
        else:
            self.store.delete_keys([self.store.key(batch_id, small) for small, _ in parts])
        return name

    def close(self) -> None:
        """Pack what is held (best effort) and stop the thread."""
        self._closed = True
        self._wake.set()
        if self._pid == os.getpid():
            self.pack_due(everything=True)


def read_index(store: Bucket, key: str) -> dict[str, tuple[int, int]] | None:
    """The index of the pack KEY (one ranged GET of its end, two when the index is longer); None when it cannot be
    read (gone, not a pack, or the store unreachable)."""
    try:
        answer = store.client.get_object(Bucket=store.bucket, Key=key, Range=f"bytes=-{PACK_TAIL}")
        tail = answer["Body"].read()
        length = index_length(tail) + _TRAILER.size
        if length > len(tail):
            size = int(answer["ContentRange"].rsplit("/", 1)[1])
            tail = store.get(key, size - length, length)
        return parse_index(tail)
    except (PackMalformed, KeyError, ValueError):
        return None
    except store.failures:
        return None  # read again at the next look for packs
