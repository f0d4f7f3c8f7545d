"""Packs: a worker process's response segments of a batch, written as one large object (the S3 store's
compaction). A group commit keeps one segment per batch, durable before the items' final states commit: a row of
the response spool (app/payload_s3_spool.py), or a small object of a store without one. At most every PACK_OBJECTS
of them, and when a batch has had no new segment for PACK_IDLE_S (it ended, or this process has no more of its
items), the process writes the bytes it still holds for them as one `packed-...bin` object, those bytes in
compressed frames (app/payload_s3_frames.py: a results read fetches and inflates only the frames that hold its
span) with its index (each segment's name, offset and length in the uncompressed bytes, and the frame table) at its
end, then deletes their rows or small objects. Rows left by a process that died are packed by another process's
packer (it looks every ADOPT_EVERY_S) once they are orphans. Packs written before (magic `RLYPACK1`, the bytes as
they are) are still read. A pack of fewer than PACK_OBJECTS stays open (its bytes held) and is rewritten with the
next segments of its batch, replacing it (a batch whose items come slowly ends as one pack per process). The pack
and its index are one PUT, so there is nothing to commit between them: a crash before the PUT completes leaves the
rows or small objects; a crash after it leaves both, equal bytes, and readers prefer the pack. A reader maps a
reference's segment to its pack (a listing of the batch's packs and their indexes, cached), else reads its row or
small object, and when neither is there (packed meanwhile) looks for the packs again.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import NamedTuple
from uuid import UUID

import psycopg

from app.payload_s3_client import Bucket
from app.payload_s3_frames import Frames, FrameWriter

log = logging.getLogger(__name__)

PACK_PREFIX = "packed-"
PACK_OBJECTS = 512  # small objects of a batch a process packs at once, at most
PACK_BYTES = 32 << 20  # ... or as many as hold this many bytes
PACK_IDLE_S = 2.0  # a batch without an upload for this long has what is left packed
PACK_FORGET_S = 600.0  # a batch's open pack is let go (its bytes no longer held) after this long without an upload
ADOPT_EVERY_S = 60.0  # how often a packer looks for the spool's orphaned rows
PACK_TAIL = 64 << 10  # bytes of a pack's end read to find its index (more when the index is longer)
_MAGIC = b"RLYPACK1"  # the small objects' bytes as they are, then the index
_FRAMED_MAGIC = b"RLYPACK2"  # their bytes in compressed frames, then the index and the frame table
_TRAILER = struct.Struct(">Q8s")  # the index's length, the magic


class PackMalformed(ValueError):
    """An object named as a pack whose end is no pack index."""


class PackIndex(NamedTuple):
    """A pack's index: each small object's (offset, length) in the pack's uncompressed bytes, and where the frames
    are (None: a pack of the older layout, its bytes as they are)."""

    parts: dict[str, tuple[int, int]]
    frames: Frames | None


def encode_pack(parts: list[tuple[str, bytes]]) -> bytes:
    """PARTS (small object name, its bytes) as one pack: the bytes in compressed frames, the index (JSON: the parts
    and the frame table), the trailer."""
    index: dict[str, list[int]] = {}
    out: list[bytes] = []
    writer = FrameWriter(out.extend)
    size = 0
    for name, data in parts:
        index[name] = [size, len(data)]
        size += len(data)
        writer.write([data])
    frames = writer.close()
    encoded = json.dumps({"parts": index, "frame": frames.frame, "size": size, "table": list(frames.table)},
                         separators=(",", ":")).encode()
    return b"".join([*out, encoded, _TRAILER.pack(len(encoded), _FRAMED_MAGIC)])


def index_length(tail: bytes) -> int:
    """How many bytes before the trailer the index of the pack ending in TAIL takes."""
    if len(tail) < _TRAILER.size:
        raise PackMalformed("shorter than its trailer")
    length, magic = _TRAILER.unpack(tail[-_TRAILER.size:])
    if magic not in (_MAGIC, _FRAMED_MAGIC):
        raise PackMalformed("no pack trailer")
    return int(length)


def parse_index(tail: bytes) -> PackIndex:
    """The index at the end of TAIL, a pack's last bytes, of either layout (its magic tells)."""
    length = index_length(tail)
    if length + _TRAILER.size > len(tail):
        raise PackMalformed("index longer than the bytes read")
    raw = json.loads(tail[len(tail) - _TRAILER.size - length:len(tail) - _TRAILER.size])
    if not tail.endswith(_FRAMED_MAGIC):
        return PackIndex(_parts(raw), None)
    return PackIndex(_parts(raw["parts"]), Frames(array("Q", raw["table"]), int(raw["frame"]), int(raw["size"])))


def _parts(raw: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
    return {str(name): (int(at[0]), int(at[1])) for name, at in raw.items()}


@dataclass
class _Unpacked:
    """One batch's small objects this process uploaded, with their bytes: those not packed yet (FRESH of them) and
    those of its open PACK (fewer than PACK_OBJECTS: packed again with the next ones, so that a batch whose items
    come slowly still ends as one pack per process)."""

    parts: list[tuple[str, bytes]] = field(default_factory=list)
    size: int = 0
    last: float = 0.0
    fresh: int = 0
    pack: str | None = None


@dataclass
class Due:
    """A batch's parts to pack, and the open pack they replace (deleted with the small objects)."""

    batch_id: UUID
    parts: list[tuple[str, bytes]]
    pack: str | None


class Unpacked:
    """Every batch's small objects held by this process; what is due for packing."""

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
            held.fresh += 1
            held.last = time.monotonic()
            return self._full(held)

    def _full(self, held: _Unpacked) -> bool:
        return len(held.parts) >= self.objects or held.size >= PACK_BYTES

    def due(self, *, everything: bool = False, alone: bool = False) -> list[Due]:
        """Take the batches due: PACK_OBJECTS of them (or PACK_BYTES), idle ones, or EVERYTHING, each with two
        segments or more unless ALONE (one alone is held until another comes: packing a lone small object gains
        nothing, a lone spool row is moved into the bucket). A batch with nothing new for
        PACK_FORGET_S (or at EVERYTHING) has its open pack closed: its bytes let go."""
        now, taken = time.monotonic(), []
        with self._lock:
            for batch_id, held in list(self._batches.items()):
                if not held.fresh:
                    if everything or now - held.last >= PACK_FORGET_S:
                        del self._batches[batch_id]
                elif (self._full(held) or everything or now - held.last >= self.idle_s) \
                        and len(held.parts) > (0 if alone else 1):
                    del self._batches[batch_id]
                    taken.append(Due(batch_id, held.parts, held.pack))
        return taken

    def packed(self, due: Due, pack: str) -> None:
        """DUE was written as PACK: held as the batch's open pack unless full."""
        if len(due.parts) < self.objects and sum(len(data) for _, data in due.parts) < PACK_BYTES:
            self._merge(due.batch_id, due.parts, pack, fresh=0)

    def give_back(self, due: Due) -> None:
        """DUE could not be written: packed again later."""
        self._merge(due.batch_id, due.parts, due.pack, fresh=len(due.parts))

    def _merge(self, batch_id: UUID, parts: list[tuple[str, bytes]], pack: str | None, *, fresh: int) -> None:
        with self._lock:
            held = self._batches.setdefault(batch_id, _Unpacked())
            held.parts[:0] = parts
            held.size += sum(len(data) for _, data in parts)
            held.fresh += fresh
            held.pack = pack
            held.last = held.last or time.monotonic()

    def forget(self, batch_id: UUID) -> None:
        with self._lock:
            self._batches.pop(batch_id, None)


@dataclass
class PackMap:
    """What a reader knows of a batch's packs: each pack's index, where each packed small object is (in the
    newest pack that holds it), and the frames of each compressed pack."""

    indexes: dict[str, PackIndex] = field(default_factory=dict)
    where: dict[str, tuple[str, int]] = field(default_factory=dict)  # small object → (pack, its offset there)
    frames: dict[str, Frames] = field(default_factory=dict)

    @classmethod
    def of(cls, indexes: list[tuple[str, PackIndex]]) -> PackMap:
        """The map of INDEXES (pack, its index), oldest first."""
        found = cls()
        for pack, index in indexes:
            found.indexes[pack] = index
            found.where.update((name, (pack, offset)) for name, (offset, _length) in index.parts.items())
            if index.frames is not None:
                found.frames[pack] = index.frames
        return found


class Packer:
    """A process's packing of its small objects, on a thread of its own (made again in a forked child): a batch's
    are packed when PACK_OBJECTS are held, when it had no upload for the idle time, and all of them at close."""

    def __init__(self, store: Bucket, unpacked: Unpacked, *, adopt_every_s: float = ADOPT_EVERY_S) -> None:
        self.store, self.unpacked, self.adopt_every_s = store, unpacked, adopt_every_s
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
        adopted = -self.adopt_every_s
        while not self._closed:
            self._wake.wait(min(self.unpacked.idle_s / 2, self.adopt_every_s))
            self._wake.clear()
            try:
                self.pack_due()
                if time.monotonic() - adopted >= self.adopt_every_s:
                    adopted = time.monotonic()
                    self.adopt()
            except Exception:  # a bug must not end packing for the process's life: its objects stay readable
                log.exception("packing small response objects failed")

    def adopt(self) -> int:
        """Pack the spool's orphaned rows (app/payload_s3_spool.Spool.adopt); how many were packed."""
        if self.store.spool is None:
            return 0
        try:
            return self.store.spool.adopt(self._write_adopted)
        except psycopg.Error as exc:
            log.warning("cannot look for the response spool's orphaned rows: %s", exc)
            return 0

    def _write_adopted(self, batch_id: UUID, parts: list[tuple[str, bytes]]) -> bool:
        try:
            self._write(batch_id, parts)
        except self.store.failures:
            return False
        return True

    def pack_due(self, *, everything: bool = False) -> int:
        """Pack the batches due (EVERYTHING: all held); how many packs were written."""
        written = 0
        for due in self.unpacked.due(everything=everything, alone=self.store.spool is not None):
            try:
                name = self.pack(due.batch_id, due.parts, due.pack)
            except self.store.failures:
                self.unpacked.give_back(due)  # the store down: packed when it is back
                continue
            written += 1
            if name is not None:
                self.unpacked.packed(due, name)
        return written

    def pack(self, batch_id: UUID, parts: list[tuple[str, bytes]], replaces: str | None = None) -> str | None:
        """Write PARTS of BATCH_ID as one pack, then delete their rows (or small objects) and the pack it
        REPLACES; the pack's name (None: the batch was removed meanwhile)."""
        name = self._write(batch_id, parts)
        if name is not None:  # else the removal deletes them (a row spooled after it: once an orphan)
            self.store.drop_packed(batch_id, [small for small, _ in parts], replaces)
        return name

    def _write(self, batch_id: UUID, parts: list[tuple[str, bytes]]) -> str | None:
        """Put PARTS of BATCH_ID as a new pack; its name. A pack of a batch removed meanwhile (its request file
        gone) is deleted again rather than outlive it (None)."""
        name = self.store.object_name(PACK_PREFIX, "bin")
        key = self.store.key(batch_id, name)
        self.store.put_new(key, encode_pack(parts))
        if self.store.removed(batch_id):
            self.store.delete_keys([key])
            return None
        return name

    def close(self) -> None:
        """Pack what is held (best effort) and stop the thread."""
        self._closed = True
        self._wake.set()
        if self._pid == os.getpid():
            self.pack_due(everything=True)


def read_index(store: Bucket, key: str) -> PackIndex | None:
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
    except (PackMalformed, KeyError, TypeError, ValueError):
        return None
    except store.failures:
        return None  # read again at the next look for packs
