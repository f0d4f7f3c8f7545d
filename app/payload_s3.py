"""The payload port on an S3-compatible bucket (RELAY_PAYLOAD_BACKEND=s3): replicas share nothing but Postgres,
RabbitMQ and the bucket. The layout (under RELAY_S3_PREFIX; docs/batches.md#payload-store tells it too):

- `<batch_id>/requests.bin`: the batch's request file, in the folder store's format (app/payload_files.py), written
  to a local staging file first and uploaded whole (multipart when large), so it is visible whole or not at all.
- `<batch_id>/responses-<process>-<n>.seg`: S3 has no append, so the responses a worker process keeps for a batch
  between two group commits are one immutable object, uploaded by `sync()` (with If-None-Match, never over
  another) before their final states commit. A reference is (object, offset, length), read back by byte range.
- `files/<file_id>`: an OpenAI Files API upload (staged on local disk while received, then uploaded whole).

A sync that fails keeps what it could not upload and tries it again first at the next sync, which fails as long as
anything is left: a response is never committed with a reference to bytes that are not in the bucket.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from app.payload_files import (
    TRAILER_SIZE,
    IncompleteFile,
    RequestIndex,
    WritePath,
    parse_offsets,
    parse_trailer,
    write_request_file,
)
from app.payload_port import (
    SEGMENT_NAME,
    FileBytesMissing,
    FileStoreUnavailable,
    Found,
    PayloadMissing,
    PayloadStoreUnavailable,
    ResponseRef,
    StagedFile,
    Wanted,
    by_segment,
    process_token,
    slice_span,
    spans,
)

if TYPE_CHECKING:
    from array import array

    from app.payload_files import Body
    from app.settings import Settings

REQUESTS = "requests.bin"
FILES = "files/"
_INDEXES = 64  # request-file indexes kept per process (a 100,000-item batch's is 800 kB)
_DELETE_MAX = 1000  # keys per DeleteObjects call (S3's limit)
T = TypeVar("T")
READ_PARALLEL = 16  # ranged GETs a results read has in flight at once
READ_RETRIES_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between reads of a request while the store is unreachable


def s3_client(settings: Settings, credentials: Mapping[str, str] | None = None) -> Any:
    """A boto3 S3 client for SETTINGS (thread-safe; one per process). Checksums only when an operation requires
    them, as S3-compatible servers other than AWS expect; path-style addressing for an endpoint URL. Credentials:
    CREDENTIALS' AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the AWS SDK's usual chain (the environment, ...)."""
    import boto3
    from botocore.config import Config

    config = Config(request_checksum_calculation="when_required", response_checksum_validation="when_required",
                    retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60,
                    max_pool_connections=64, s3={"addressing_style": "path"} if settings.s3_endpoint_url else None)
    keys = {} if credentials is None else {"aws_access_key_id": credentials["AWS_ACCESS_KEY_ID"],
                                           "aws_secret_access_key": credentials["AWS_SECRET_ACCESS_KEY"]}
    return boto3.session.Session().client("s3", endpoint_url=settings.s3_endpoint_url or None,
                                          region_name=settings.s3_region, config=config, **keys)


def _failures() -> tuple[type[Exception], ...]:
    """What a failed call to the object store raises (botocore's and boto3's errors; OSError of local staging)."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError, Boto3Error, OSError


def _passing(exc: Exception) -> bool:
    """Whether a failed call may succeed if tried again: the store unreachable or answering 5xx (not a 4xx)."""
    status = _status(exc)
    return status >= 500 or (status == 0 and not isinstance(exc, IncompleteFile))


def _status(exc: Exception) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class _Pending:
    """The responses kept for one batch since the last sync: one future object."""

    def __init__(self, batch_id: UUID, name: str) -> None:
        self.batch_id, self.name, self.data = batch_id, name, bytearray()


class S3Store:
    """The payload port on a bucket; STAGING is a local folder (this replica's own) for files being uploaded."""

    def __init__(self, client: Any, bucket: str, prefix: str, staging: str | os.PathLike[str], *, mode: int) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix
        self.failures = _failures()
        self.staging, self.write_path = Path(staging), WritePath(mode)
        self.uploads = S3Uploads(self)
        self._lock = threading.Lock()
        self._pending: dict[UUID, _Pending] = {}
        self._retry: list[_Pending] = []  # uploads a failed sync left: tried first by the next one
        self._generation = 0
        self._pid, self._token = os.getpid(), process_token()
        self._indexes: OrderedDict[UUID, array[int]] = OrderedDict()
        self._readers: ThreadPoolExecutor | None = None
        self._readers_pid = 0

    def key(self, batch_id: UUID, name: str) -> str:
        return f"{self.prefix}{batch_id}/{name}"

    # requests ----------------------------------------------------------------------------------------------------

    def write_requests(self, batch_id: UUID, bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) \
            -> None:
        """Write the request file to a local staging file, then upload it whole (nothing is visible before the
        upload completes; a failed multipart upload is aborted)."""
        try:
            with self.staged_file() as handle:
                write_request_file(handle.fileno(), bodies, abandoned)
                if abandoned is not None and abandoned():
                    raise PayloadStoreUnavailable(message="cannot write the batch's request file: abandoned")
                handle.seek(0)
                self.client.upload_fileobj(handle, self.bucket, self.key(batch_id, REQUESTS))
        except self.failures as exc:
            raise PayloadStoreUnavailable(message=f"cannot write the batch's request file: {_reason(exc)}") from exc

    def read_request(self, batch_id: UUID, idx: int) -> bytes:
        offsets = self._index(batch_id)
        if not 0 <= idx < len(offsets) - 1:
            raise PayloadMissing(f"item {idx} is not in the request file ({len(offsets) - 1} items)")
        if offsets[idx + 1] == offsets[idx]:
            return b""
        try:
            return self._patiently(lambda: self._get(self.key(batch_id, REQUESTS), offsets[idx],
                                                     offsets[idx + 1] - offsets[idx]))
        except self.failures as exc:
            raise PayloadMissing(f"{REQUESTS}: {_reason(exc)}") from exc

    def _patiently(self, read: Callable[[], T]) -> T:
        """READ, tried again while the store is unreachable or failing (READ_RETRIES_S): an item waits out a short
        outage rather than fail at once."""
        for wait in READ_RETRIES_S:
            try:
                return read()
            except self.failures as exc:
                if not _passing(exc):
                    raise
                time.sleep(wait)
        return read()

    def _index(self, batch_id: UUID) -> array[int]:
        """The batch's request-file offsets (two range reads the first time, then from memory)."""
        with self._lock:
            found = self._indexes.get(batch_id)
            if found is not None:
                self._indexes.move_to_end(batch_id)
                return found
        key = self.key(batch_id, REQUESTS)
        try:
            answer = self._patiently(lambda: self.client.get_object(Bucket=self.bucket, Key=key,
                                                                    Range=f"bytes=-{TRAILER_SIZE}"))
            size = int(answer["ContentRange"].rsplit("/", 1)[1])
            index: RequestIndex = parse_trailer(answer["Body"].read(), size)
            offsets = parse_offsets(self._patiently(lambda: self._get(key, index.index_at, 8 * (index.count + 1))))
        except (IncompleteFile, KeyError, ValueError) as exc:
            raise PayloadMissing(f"{REQUESTS}: {_reason(exc)}") from exc
        except self.failures as exc:
            raise PayloadMissing(f"{REQUESTS}: {_reason(exc)}") from exc
        with self._lock:
            self._indexes[batch_id] = offsets
            while len(self._indexes) > _INDEXES:
                self._indexes.popitem(last=False)
        return offsets

    # responses ---------------------------------------------------------------------------------------------------

    def append_response(self, batch_id: UUID, idx: int, body: bytes) -> ResponseRef:
        """Add item IDX's response to this process's next object of the batch; in the bucket after sync()."""
        with self._lock:
            if os.getpid() != self._pid:  # a forked child must not name its objects as its parent does
                self._pid, self._token, self._pending, self._retry = os.getpid(), process_token(), {}, []
            pending = self._pending.get(batch_id)
            if pending is None:
                self._generation += 1
                name = f"responses-{self._token}-{self._generation}.seg"
                pending = self._pending[batch_id] = _Pending(batch_id, name)
            offset = len(pending.data)
            pending.data += body
        return ResponseRef(pending.name, offset, len(body))

    def sync(self) -> None:
        """Upload every object kept since the last sync (and any a failed sync left), one PUT each."""
        with self._lock:
            todo = self._retry + list(self._pending.values())
            self._retry, self._pending = [], {}
        failed: list[_Pending] = []
        reason = ""
        for pending in todo:
            try:
                self._put(pending)
            except self.failures as exc:
                failed.append(pending)
                reason = _reason(exc)
        if failed:
            with self._lock:
                self._retry = failed + self._retry
            raise PayloadStoreUnavailable(message=f"cannot upload the responses: {reason}")

    def _put(self, pending: _Pending) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(pending.batch_id, pending.name),
                                   Body=bytes(pending.data), IfNoneMatch="*")
        except self.failures as exc:
            if _status(exc) != 412:  # 412: a retry of a PUT that did land (the same bytes, never overwritten)
                raise

    def read_response(self, batch_id: UUID, idx: int, ref: ResponseRef | None) -> bytes | None:
        if ref is None or not SEGMENT_NAME.fullmatch(ref.segment) or ref.offset < 0 or ref.length < 0:
            return None
        if ref.length == 0:
            return b""
        try:
            return self._get(self.key(batch_id, ref.segment), ref.offset, ref.length)
        except self.failures:
            return None

    def read_responses(self, batch_id: UUID, items: Sequence[Wanted]) -> Found:
        """read_response of many ITEMS: one ranged GET per span of an object (app/payload_port.spans), up to
        READ_PARALLEL of them at once (a batch's responses are many small objects: one per group commit)."""
        found: Found = [None] * len(items)
        grouped, _ = by_segment(items)
        reads = [(self.key(batch_id, segment), start, end, span) for segment, ranges in grouped.items()
                 if SEGMENT_NAME.fullmatch(segment) for start, end, span in spans(ranges)]
        for (_, start, _, span), data in zip(reads, self._reader().map(self._get_span, reads), strict=True):
            if data is not None:
                slice_span(data, start, span, found)
        return found

    def _get_span(self, read: tuple[str, int, int, Any]) -> bytes | None:
        key, start, end, _ = read
        if end == start:
            return b""
        try:
            return self._get(key, start, end - start)
        except self.failures:
            return None

    def _reader(self) -> ThreadPoolExecutor:
        """This process's pool of result readers (made again in a forked child)."""
        with self._lock:
            if self._readers is None or self._readers_pid != os.getpid():
                self._readers, self._readers_pid = ThreadPoolExecutor(READ_PARALLEL, "relay-s3-read"), os.getpid()
            return self._readers

    def _get(self, key: str, offset: int, length: int) -> bytes:
        answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
        data: bytes = answer["Body"].read()
        if len(data) != length:
            raise OSError(f"{key}: {len(data)} bytes where {length} were expected")
        return data

    # retention ---------------------------------------------------------------------------------------------------

    def remove_batch(self, batch_id: UUID) -> bool:
        with self._lock:
            self._pending.pop(batch_id, None)
            self._retry = [p for p in self._retry if p.batch_id != batch_id]
            self._indexes.pop(batch_id, None)
        try:
            keys = [key for key, _ in self._list(f"{self.prefix}{batch_id}/")]
            for start in range(0, len(keys), _DELETE_MAX):
                objects = [{"Key": key} for key in keys[start:start + _DELETE_MAX]]
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            return not any(True for _ in self._list(f"{self.prefix}{batch_id}/"))
        except self.failures:
            return False

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
        if self._readers is not None and self._readers_pid == os.getpid():
            self._readers.shutdown(wait=False)
            self._readers = None

    def staged_file(self) -> IO[bytes]:
        """A new anonymous file in the local staging folder, open for writing and reading."""
        self.write_path.make_dir(self.staging)
        return tempfile.TemporaryFile(dir=self.staging)


class S3Uploads:
    """The OpenAI Files API's uploads in the bucket, under `files/`."""

    def __init__(self, store: S3Store) -> None:
        self.store = store

    def _key(self, file_id: UUID) -> str:
        return f"{self.store.prefix}{FILES}{file_id}"

    def stage(self) -> StagedFile:
        try:
            self.store.write_path.make_dir(self.store.staging)
            fd, name = tempfile.mkstemp(dir=self.store.staging, suffix=".part")
            os.fchmod(fd, self.store.write_path.file_mode)
            return StagedFile(Path(name), os.fdopen(fd, "w+b"))
        except OSError as exc:
            raise FileStoreUnavailable(message=f"cannot store the file: {exc.strerror or exc}") from exc

    def publish(self, staged: StagedFile, file_id: UUID) -> None:
        try:
            staged.handle.flush()
            staged.handle.seek(0)
            self.store.client.upload_fileobj(staged.handle, self.store.bucket, self._key(file_id))
        except self.store.failures as exc:
            raise FileStoreUnavailable(message=f"cannot store the file: {_reason(exc)}") from exc
        finally:
            self.discard(staged)

    @staticmethod
    def discard(staged: StagedFile) -> None:
        staged.handle.close()
        staged.path.unlink(missing_ok=True)

    def open(self, file_id: UUID) -> IO[bytes]:
        """The upload, copied to a local anonymous file (read as a file, line by line, by its users)."""
        handle = None
        try:
            handle = self.store.staged_file()
            self.store.client.download_fileobj(self.store.bucket, self._key(file_id), handle)
            handle.seek(0)
            return handle
        except self.store.failures as exc:
            if handle is not None:
                handle.close()
            raise FileBytesMissing(f"{file_id}: {_reason(exc)}") from exc

    def remove(self, file_id: UUID) -> None:
        try:
            self.store.client.delete_object(Bucket=self.store.bucket, Key=self._key(file_id))
        except self.store.failures:
            pass  # best effort, like the folder store's


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__

