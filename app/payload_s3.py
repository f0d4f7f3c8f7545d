"""The payload port on an S3-compatible bucket (RELAY_PAYLOAD_BACKEND=s3): replicas share nothing but Postgres,
RabbitMQ and the bucket. The layout (under RELAY_S3_PREFIX; docs/batches.md#payload-store tells it too):

- `<batch_id>/requests.bin`: the batch's request file in compressed frames (app/payload_s3_frames.py; one written
  before in the folder store's format, app/payload_files.py, is still read), streamed into a multipart upload as
  it is produced (app/payload_s3_stream.py; one PUT when small), so it is visible whole or not at all.
- Responses: S3 has no append, so the responses a worker process keeps for a batch between two group commits are
  one segment, `responses-<process>-<n>.seg`, made durable by `sync()` before their final states commit: a row of
  the response spool in Postgres (app/payload_s3_spool.py; one short transaction instead of a PUT per commit), or,
  for a store made without a database (tools, tests), an immutable object `<batch_id>/responses-...seg` (with
  If-None-Match, never over another). A reference is (segment, offset, length).
- `<batch_id>/packed-<process>-<n>.bin`: many such segments of one process, packed into one object (compressed
  frames) with an index at its end, after which their rows (or small objects) are deleted
  (app/payload_s3_packs.py): a batch ends as a few large objects.
- `files/<file_id>`: an OpenAI Files API upload (app/payload_s3_uploads.py).

A sync that fails keeps what it could not keep and tries it again first at the next sync, which fails as long as
anything is left: a response is never committed with a reference to bytes that are not durable (Postgres being away
is raised as it is, so that the group writer waits for the database rather than give the responses up).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import psycopg

from app.payload_files import IncompleteFile, WritePath
from app.payload_port import (
    SEGMENT_NAME,
    Found,
    PayloadMissing,
    PayloadStoreUnavailable,
    ResponseRef,
    Wanted,
    process_token,
)
from app.payload_s3_blocks import RequestBlocks
from app.payload_s3_client import failures, passing, reason, s3_client, status
from app.payload_s3_frames import TAIL, RequestLayout, load_layout, write_framed_requests
from app.payload_s3_packs import Packer, Unpacked
from app.payload_s3_reads import ResponseReader
from app.payload_s3_stream import ObjectStream
from app.payload_s3_uploads import S3Uploads

if TYPE_CHECKING:
    from app.payload_files import Body
    from app.payload_s3_spool import Spool

__all__ = ["S3Store", "s3_client"]

REQUESTS = "requests.bin"
_INDEXES = 64  # request-file indexes kept per process (a 100,000-item batch's index is 800 kB)
_DELETE_MAX = 1000  # keys per DeleteObjects call (S3's limit)
_REMOVE_ROUNDS = 3  # listings a removal deletes, so that a pack written during the first is removed too
log = logging.getLogger(__name__)
T = TypeVar("T")
READ_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between reads of a request while the store is unreachable


class _Pending:
    """The responses kept for one batch since the last sync: one future object."""

    def __init__(self, batch_id: UUID, name: str) -> None:
        self.batch_id, self.name, self.data = batch_id, name, bytearray()


class S3Store:
    """The payload port on a bucket; STAGING is a local folder (this replica's own) for files being uploaded; SPOOL
    where responses are durable until packed (None: a small object each sync)."""

    def __init__(self, client: Any, bucket: str, prefix: str, staging: str | os.PathLike[str], *, mode: int,
                 unpacked: Unpacked | None = None, spool: Spool | None = None) -> None:
        self.client, self.bucket, self.prefix, self.spool = client, bucket, prefix, spool
        self.failures = failures()
        self._failing: tuple[type[Exception], ...] = (*self.failures, psycopg.Error)  # the bucket's or the spool's
        self.staging, self.write_path = Path(staging), WritePath(mode)
        self.uploads = S3Uploads(self)
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()  # one thread loads a request file's index; the others wait for it
        self._pending: dict[UUID, _Pending] = {}
        self._retry: list[_Pending] = []  # uploads a failed sync left: tried first by the next one
        self._generation = 0
        self._pid, self._token = os.getpid(), process_token()
        self._indexes: OrderedDict[UUID, RequestLayout] = OrderedDict()
        self._blocks = RequestBlocks()
        self.packer = Packer(self, unpacked or Unpacked())
        self.reader = ResponseReader(self)

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
        """Make every segment kept since the last sync (and any a failed sync left) durable: spooled in one
        transaction, or one PUT each; each is then held for packing."""
        with self._lock:
            todo = self._retry + list(self._pending.values())
            self._retry, self._pending = [], {}
        if self.spool is not None:
            self._spool(self.spool, todo)
            return
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

    def _spool(self, spool: Spool, todo: list[_Pending]) -> None:
        """sync() into SPOOL: TODO's segments as rows in one transaction, then held for packing."""
        rows = [(pending.batch_id, pending.name, bytes(pending.data)) for pending in todo]
        try:
            spool.put(rows)
        except psycopg.Error as exc:
            with self._lock:
                self._retry = todo + self._retry
            if isinstance(exc, psycopg.OperationalError):
                raise  # the database away: the final states cannot commit either, and are tried again with these
            raise PayloadStoreUnavailable(message=f"cannot spool the responses: {exc}") from exc
        for batch_id, name, body in rows:
            self.packer.uploaded(batch_id, name, body)

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
        return self.reader.read(batch_id, items)

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
        self.reader.forget(batch_id)
        try:
            if self.spool is not None:
                self.spool.delete(batch_id)
            for _ in range(_REMOVE_ROUNDS):
                keys = [key for key, _ in self.list_keys(f"{self.prefix}{batch_id}/")]
                if not keys:
                    return True
                self.delete_keys(keys)
            return not any(True for _ in self.list_keys(f"{self.prefix}{batch_id}/"))
        except self._failing:
            return False

    def drop_packed(self, batch_id: UUID, segments: list[str], pack: str | None = None) -> None:
        """SEGMENTS of BATCH_ID are in a pack: delete their rows (or small objects), and the pack PACK (one they
        replace). A spool that cannot be reached keeps its rows: they are packed again once orphans (equal bytes)."""
        keys = [pack] if pack else []
        if self.spool is None:
            keys += segments
        else:
            try:
                self.spool.delete(batch_id, segments)
            except psycopg.Error as exc:
                log.warning("cannot delete packed rows of the response spool: %s", exc)
        self.delete_keys([self.key(batch_id, name) for name in keys])

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
            for key, written in self.list_keys(self.prefix):
                try:
                    batch_id = UUID(key[len(self.prefix):].split("/", 1)[0])
                except ValueError:
                    continue  # files/ and anything else under the prefix
                newest[batch_id] = max(written, newest.get(batch_id, 0.0))
            if self.spool is not None:
                for batch_id, written in self.spool.batches().items():
                    newest[batch_id] = max(written, newest.get(batch_id, 0.0))
        except self._failing:
            pass
        yield from newest.items()

    def list_keys(self, prefix: str) -> Iterator[tuple[str, float]]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for entry in page.get("Contents", ()):
                yield entry["Key"], entry["LastModified"].timestamp()

    def close(self) -> None:
        try:
            self.sync()
        except (PayloadStoreUnavailable, psycopg.Error):
            pass
        self.packer.close()
        self.reader.close()

    def staged_file(self) -> IO[bytes]:
        """A new anonymous file in the local staging folder, open for writing and reading."""
        self.write_path.make_dir(self.staging)
        return tempfile.TemporaryFile(dir=self.staging)
