"""The payload port on an S3-compatible bucket (RELAY_PAYLOAD_BACKEND=s3): replicas share nothing but Postgres,
RabbitMQ and the bucket. The layout (under RELAY_S3_PREFIX; docs/batches.md#payload-store tells it too):

- `<batch_id>/requests.bin`: the batch's request file in compressed frames (app/payload_s3_frames.py; one written
  before in the folder store's format, app/payload_files.py, is still read), streamed into a multipart upload as
  it is produced (app/payload_s3_stream.py; one PUT when small), so it is visible whole or not at all.
- `<batch_id>/responses-<process>-<n>.seg`: S3 has no append, so the responses a worker process keeps for a batch
  between two group commits are one immutable object, uploaded by `sync()` (with If-None-Match, never over
  another) before their final states commit. A reference is (object, offset, length), read back by byte range.
- `<batch_id>/packed-<process>-<n>.bin`: many such small objects of one process, packed into one (compressed
  frames) with an index at its end, after which the small ones are deleted (app/payload_s3_packs.py): a batch ends
  as a few large objects.
- `files/<file_id>`: an OpenAI Files API upload (app/payload_s3_uploads.py).

A sync that fails keeps what it could not upload and tries it again first at the next sync, which fails as long as
anything is left: a response is never committed with a reference to bytes that are not in the bucket.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from app.payload_files import IncompleteFile, WritePath
from app.payload_port import (
    SEGMENT_NAME,
    Found,
    PayloadMissing,
    PayloadStoreUnavailable,
    Placed,
    ResponseRef,
    Wanted,
    by_segment,
    process_token,
    slice_span,
    spans,
)
from app.payload_s3_blocks import RequestBlocks
from app.payload_s3_client import failures, passing, reason, s3_client, status
from app.payload_s3_frames import TAIL, Frames, RequestLayout, load_layout, write_framed_requests
from app.payload_s3_packs import PACK_PREFIX, Packer, PackMap, Unpacked, read_index
from app.payload_s3_stream import ObjectStream
from app.payload_s3_uploads import S3Uploads

if TYPE_CHECKING:
    from app.payload_files import Body

__all__ = ["S3Store", "s3_client"]

REQUESTS = "requests.bin"
_INDEXES = 64  # request-file indexes (and pack maps) kept per process (a 100,000-item batch's index is 800 kB)
_DELETE_MAX = 1000  # keys per DeleteObjects call (S3's limit)
_REMOVE_ROUNDS = 3  # listings a removal deletes, so that a pack written during the first is removed too
T = TypeVar("T")
READ_PARALLEL = 16  # ranged GETs a results read has in flight at once
READ_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between reads of a request while the store is unreachable


class _Pending:
    """The responses kept for one batch since the last sync: one future object."""

    def __init__(self, batch_id: UUID, name: str) -> None:
        self.batch_id, self.name, self.data = batch_id, name, bytearray()


class S3Store:
    """The payload port on a bucket; STAGING is a local folder (this replica's own) for files being uploaded."""

    def __init__(self, client: Any, bucket: str, prefix: str, staging: str | os.PathLike[str], *, mode: int,
                 unpacked: Unpacked | None = None) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix
        self.failures = failures()
        self.staging, self.write_path = Path(staging), WritePath(mode)
        self.uploads = S3Uploads(self)
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()  # one thread loads a request file's index; the others wait for it
        self._pending: dict[UUID, _Pending] = {}
        self._retry: list[_Pending] = []  # uploads a failed sync left: tried first by the next one
        self._generation = 0
        self._pid, self._token = os.getpid(), process_token()
        self._indexes: OrderedDict[UUID, RequestLayout] = OrderedDict()
        self._pack_maps: OrderedDict[UUID, PackMap] = OrderedDict()
        self._blocks = RequestBlocks()
        self.packer = Packer(self, unpacked or Unpacked())
        self._readers: ThreadPoolExecutor | None = None
        self._readers_pid = 0

    def key(self, batch_id: UUID, name: str) -> str:
        return f"{self.prefix}{batch_id}/{name}"

    # requests ----------------------------------------------------------------------------------------------------

    def write_requests(self, batch_id: UUID, bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) \
            -> None:
        """Stream the request file, compressed (app/payload_s3_frames.py), into the bucket as BODIES are consumed
        (app/payload_s3_stream.py: parts go up while the next are produced; one PUT when small). Nothing is
        visible before the upload completes: a failure, or ABANDONED answering True, aborts it."""
        stream = ObjectStream(self, self.key(batch_id, REQUESTS))
        try:
            write_framed_requests(bodies, stream.write, abandoned)
            if abandoned is not None and abandoned():
                raise PayloadStoreUnavailable(message="cannot write the batch's request file: abandoned")
            stream.complete()
        except BaseException as exc:
            stream.abort()
            if isinstance(exc, self.failures):
                raise PayloadStoreUnavailable(message=f"cannot write the batch's request file: {reason(exc)}") \
                    from exc
            raise

    def read_request(self, batch_id: UUID, idx: int) -> bytes:
        layout = self._index(batch_id)
        offsets = layout.offsets
        if not 0 <= idx < len(offsets) - 1:
            raise PayloadMissing(f"item {idx} is not in the request file ({len(offsets) - 1} items)")
        if offsets[idx + 1] == offsets[idx]:
            return b""
        key = self.key(batch_id, REQUESTS)

        def get(start: int, length: int) -> bytes:
            return self.get(key, start, length)

        try:
            return self._blocks.read(batch_id, offsets[idx], offsets[idx + 1], offsets[-1],
                                     lambda start, length: self._patiently(lambda: layout.read(get, start, length)))
        except self.failures as exc:
            raise PayloadMissing(f"{REQUESTS}: {reason(exc)}") from exc

    def _patiently(self, read: Callable[[], T]) -> T:
        """READ, tried again while the store is unreachable or failing (READ_RETRIES_S): an item waits out a short
        outage rather than fail at once."""
        for wait in READ_RETRIES_S:
            try:
                return read()
            except self.failures as exc:
                if not passing(exc):
                    raise
                time.sleep(wait)
        return read()

    def _index(self, batch_id: UUID) -> RequestLayout:
        """The batch's request-file offsets, and its frames when compressed (two range reads the first time, by one
        thread while the others wait, then from memory)."""
        with self._index_lock:
            with self._lock:
                found = self._indexes.get(batch_id)
                if found is not None:
                    self._indexes.move_to_end(batch_id)
                    return found
            offsets = self._load_index(batch_id)
            with self._lock:
                self._indexes[batch_id] = offsets
                while len(self._indexes) > _INDEXES:
                    self._indexes.popitem(last=False)
            return offsets

    def _load_index(self, batch_id: UUID) -> RequestLayout:
        key = self.key(batch_id, REQUESTS)
        try:
            answer = self._patiently(lambda: self.client.get_object(Bucket=self.bucket, Key=key,
                                                                    Range=f"bytes=-{TAIL}"))
            size = int(answer["ContentRange"].rsplit("/", 1)[1]) if "ContentRange" in answer else \
                int(answer["ContentLength"])  # a file shorter than TAIL may be answered whole
            return load_layout(answer["Body"].read(), size,
                               lambda start, length: self._patiently(lambda: self.get(key, start, length)))
        except (IncompleteFile, KeyError, ValueError) as exc:
            raise PayloadMissing(f"{REQUESTS}: {reason(exc)}") from exc
        except self.failures as exc:
            raise PayloadMissing(f"{REQUESTS}: {reason(exc)}") from exc

    # responses ---------------------------------------------------------------------------------------------------

    def object_name(self, kind: str, suffix: str) -> str:
        """A new object's name, unique to this process: KIND, the process's token, a count, SUFFIX."""
        with self._lock:
            return self._next_name(kind, suffix)

    def _next_name(self, kind: str, suffix: str) -> str:
        """object_name, the lock held."""
        if os.getpid() != self._pid:  # a forked child must not name its objects as its parent does
            self._pid, self._token, self._pending, self._retry = os.getpid(), process_token(), {}, []
        self._generation += 1
        return f"{kind}{self._token}-{self._generation}.{suffix}"

    def append_response(self, batch_id: UUID, idx: int, body: bytes) -> ResponseRef:
        """Add item IDX's response to this process's next object of the batch; in the bucket after sync() (one
        lock: a sync takes an object whole, never with an append half made)."""
        with self._lock:
            pending = self._pending.get(batch_id) if os.getpid() == self._pid else None
            if pending is None:
                name = self._next_name("responses-", "seg")
                pending = self._pending[batch_id] = _Pending(batch_id, name)
            offset = len(pending.data)
            pending.data += body
        return ResponseRef(pending.name, offset, len(body))

    def sync(self) -> None:
        """Upload every object kept since the last sync (and any a failed sync left), one PUT each; each uploaded is
        held for packing."""
        with self._lock:
            todo = self._retry + list(self._pending.values())
            self._retry, self._pending = [], {}
        failed: list[_Pending] = []
        why = ""
        for pending in todo:
            body = bytes(pending.data)
            try:
                self.put_new(self.key(pending.batch_id, pending.name), body)
            except self.failures as exc:
                failed.append(pending)
                why = reason(exc)
            else:
                self.packer.uploaded(pending.batch_id, pending.name, body)
        if failed:
            with self._lock:
                self._retry = failed + self._retry
            raise PayloadStoreUnavailable(message=f"cannot upload the responses: {why}")

    def put_new(self, key: str, body: bytes) -> None:
        """Upload a new object, never over another (If-None-Match)."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
        except self.failures as exc:
            if status(exc) != 412:  # 412: a retry of a PUT that did land (the same bytes, never overwritten)
                raise

    def read_response(self, batch_id: UUID, idx: int, ref: ResponseRef | None) -> bytes | None:
        if ref is None or not SEGMENT_NAME.fullmatch(ref.segment) or ref.offset < 0 or ref.length < 0:
            return None
        found = self.read_responses(batch_id, [(idx, *ref)])[0]
        return None if found is None else bytes(found)

    def read_responses(self, batch_id: UUID, items: Sequence[Wanted]) -> Found:
        """read_response of many ITEMS: one ranged GET per span of an object (app/payload_port.spans), a pack's
        where its small object was packed, up to READ_PARALLEL of them at once. Those whose small object is gone
        are read again from the packs found by a fresh look (packed meanwhile)."""
        found: Found = [None] * len(items)
        grouped, _ = by_segment(items)
        grouped = {segment: ranges for segment, ranges in grouped.items() if SEGMENT_NAME.fullmatch(segment)}
        failed = self._read_into(batch_id, grouped, self._pack_map(batch_id), found)
        if failed:
            packs = self._pack_map(batch_id, fresh=True)
            self._read_into(batch_id, {s: grouped[s] for s in failed if s in packs.where}, packs, found)
        return found

    def _read_into(self, batch_id: UUID, grouped: dict[str, list[tuple[int, int, int]]], packs: PackMap,
                   found: Found) -> set[str]:
        """Read GROUPED (small object → its ranges) into FOUND, through PACKS; the small objects not read. Each
        small object's spans are placed at its base in its pack, and neighbouring ones read as one."""
        per_object: dict[str, list[Placed]] = {}
        for segment, ranges in grouped.items():
            name, base = packs.where.get(segment, (segment, 0))
            per_object.setdefault(name, []).extend((base + start, end - start, segment, base, span)
                                                   for start, end, span in spans(ranges))
        reads = [(self.key(batch_id, name), start, end, placed, packs.frames.get(name))
                 for name, parts in per_object.items() for start, end, placed in spans(sorted(parts))]
        failed: set[str] = set()
        for (_, start, _, placed, _), data in zip(reads, self._reader().map(self._get_span, reads), strict=True):
            for _, _, segment, base, span in placed:
                if data is None:
                    failed.add(segment)
                else:
                    slice_span(data, start - base, span, found)  # a range's offset is in its small object
        return failed

    def _pack_map(self, batch_id: UUID, *, fresh: bool = False) -> PackMap:
        """Where the batch's packed small objects are: from memory, or (the first time, or FRESH) a listing of its
        packs, oldest first, and the indexes of those not read yet (a pack replaced since drops out)."""
        with self._lock:
            known = self._pack_maps.get(batch_id)
            if known is not None and not fresh:
                self._pack_maps.move_to_end(batch_id)
                return known
        known = known or PackMap()
        try:
            listed = sorted(self._list(self.key(batch_id, PACK_PREFIX)), key=lambda entry: entry[1])
        except self.failures:
            return known
        names = [key.rsplit("/", 1)[1] for key, _ in listed]
        new = [name for name in names if name not in known.indexes]
        read = dict(zip(new, self._reader().map(lambda name: read_index(self, self.key(batch_id, name)), new),
                        strict=True))
        found = PackMap.of([(name, index) for name in names
                            if (index := known.indexes.get(name) or read.get(name)) is not None])
        with self._lock:
            self._pack_maps[batch_id] = found
            while len(self._pack_maps) > _INDEXES:
                self._pack_maps.popitem(last=False)
        return found

    def _get_span(self, read: tuple[str, int, int, Any, Frames | None]) -> bytes | None:
        """Bytes START:END of an object (of a compressed pack's uncompressed bytes: the frames holding them); None
        when they cannot be read."""
        key, start, end, _, frames = read
        if end == start:
            return b""
        try:
            if frames is None:
                return self.get(key, start, end - start)
            return frames.read(lambda offset, length: self.get(key, offset, length), start, end - start)
        except self.failures:
            return None

    def _reader(self) -> ThreadPoolExecutor:
        """This process's pool of result readers (made again in a forked child)."""
        with self._lock:
            if self._readers is None or self._readers_pid != os.getpid():
                self._readers, self._readers_pid = ThreadPoolExecutor(READ_PARALLEL, "relay-s3-read"), os.getpid()
            return self._readers

    def get(self, key: str, offset: int, length: int) -> bytes:
        """LENGTH bytes of the object KEY from OFFSET (one ranged GET)."""
        answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
        data: bytes = answer["Body"].read()
        if len(data) != length:
            raise OSError(f"{key}: {len(data)} bytes where {length} were expected")
        return data

    # retention ---------------------------------------------------------------------------------------------------

    def remove_batch(self, batch_id: UUID) -> bool:
        """Delete every object of the batch, listing again until none is left (a pack written meanwhile deletes
        itself when it finds the request file gone, or is found by the next listing)."""
        self.packer.unpacked.forget(batch_id)
        self._blocks.forget(batch_id)
        with self._lock:
            self._pending.pop(batch_id, None)
            self._retry = [p for p in self._retry if p.batch_id != batch_id]
            self._indexes.pop(batch_id, None)
            self._pack_maps.pop(batch_id, None)
        try:
            for _ in range(_REMOVE_ROUNDS):
                keys = [key for key, _ in self._list(f"{self.prefix}{batch_id}/")]
                if not keys:
                    return True
                self.delete_keys(keys)
            return not any(True for _ in self._list(f"{self.prefix}{batch_id}/"))
        except self.failures:
            return False

    def delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_MAX):
            objects = [{"Key": key} for key in keys[start:start + _DELETE_MAX]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})

    def removed(self, batch_id: UUID) -> bool:
        """Whether the batch's request file is gone (the batch removed); the store's failures when it cannot say."""
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(batch_id, REQUESTS))
            return False
        except self.failures as exc:
            if status(exc) == 404:
                return True
            raise

    def batches(self) -> Iterator[tuple[UUID, float]]:
        """Every batch with objects in the bucket, with the time its newest object was written."""
        newest: dict[UUID, float] = {}
        try:
            for key, written in self._list(self.prefix):
                try:
                    batch_id = UUID(key[len(self.prefix):].split("/", 1)[0])
                except ValueError:
                    continue  # files/ and anything else under the prefix
                newest[batch_id] = max(written, newest.get(batch_id, 0.0))
        except self.failures:
            pass
        yield from newest.items()

    def _list(self, prefix: str) -> Iterator[tuple[str, float]]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for entry in page.get("Contents", ()):
                yield entry["Key"], entry["LastModified"].timestamp()

    def close(self) -> None:
        try:
            self.sync()
        except PayloadStoreUnavailable:
            pass
        self.packer.close()
        if self._readers is not None and self._readers_pid == os.getpid():
            self._readers.shutdown(wait=False)
            self._readers = None

    def staged_file(self) -> IO[bytes]:
        """A new anonymous file in the local staging folder, open for writing and reading."""
        self.write_path.make_dir(self.staging)
        return tempfile.TemporaryFile(dir=self.staging)
