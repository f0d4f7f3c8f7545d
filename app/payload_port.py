"""The payload port: the storage-neutral verbs every payload backend offers, and what they share.

A backend keeps each batch's request bodies and its items' responses, and the OpenAI Files API's uploads. The
folder store (`app/payloads.FolderStore`, under RELAY_BATCH_PAYLOAD_DIR) is the default; the S3 store
(`app/payload_s3.S3Store`) keeps the same things in a bucket. `app/payload_backends.open_payload_store` builds the
one RELAY_PAYLOAD_BACKEND names, once per process (`Runtime.service`).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar
from uuid import UUID

from app.errors import InsufficientStorage

if TYPE_CHECKING:
    from app.payload_files import Body

SEGMENT_NAME = re.compile(r"responses-[0-9a-f]+-[0-9a-f]+-[0-9]+\.seg")  # a ResponseRef's segment, in every backend
SPAN_GAP = 64 << 10  # results read a response object in spans joining ranges at most this far apart
SPAN_MAX = 8 << 20  # ... and at most this long


class PayloadStoreUnavailable(InsufficientStorage):
    """The payload store cannot be written (a folder missing, read-only or full; an object store down or refusing)."""

    code = "payload_store_unavailable"


class FileStoreUnavailable(InsufficientStorage):
    """An upload cannot be kept (the same causes)."""

    code = "payload_store_unavailable"


class PayloadMissing(Exception):
    """An item's request is not visible to this replica (or cannot be read)."""


class FileBytesMissing(Exception):
    """An uploaded file's bytes are not visible to this replica."""


class ResponseRef(NamedTuple):
    """Where an item's response is, opaque to everyone but its backend: a segment (a file in the batch's folder, an
    object of the batch) and a byte range in it."""

    segment: str
    offset: int
    length: int


# An item whose response is wanted: (idx, segment, offset, length); a segment of None means the older layout's
# file of that idx (or no response).
Wanted = tuple[int, str | None, int | None, int | None]
# What a bulk read finds for each wanted item, in order: its bytes, or None when they are not visible here.
Found = list[bytes | memoryview | None]


@dataclass
class StagedFile:
    """An upload being received: its open handle and where it lies (on local disk) until published."""

    path: Path
    handle: IO[bytes]

    def size(self) -> int:
        self.handle.flush()
        return os.fstat(self.handle.fileno()).st_size


class UploadStore(Protocol):
    """The OpenAI Files API's uploads: received into a staged local file, then published whole under their id."""

    def stage(self) -> StagedFile: ...

    def publish(self, staged: StagedFile, file_id: UUID) -> None: ...

    def discard(self, staged: StagedFile) -> None: ...

    def open(self, file_id: UUID) -> IO[bytes]: ...

    def remove(self, file_id: UUID) -> None: ...


class PayloadStore(Protocol):
    """A process's batch payloads; every method is safe to call from many threads."""

    @property
    def uploads(self) -> UploadStore: ...

    def write_requests(self, batch_id: UUID, bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) \
            -> None:
        """Keep a new batch's request bodies whole or not at all (PayloadStoreUnavailable); ABANDONED is asked
        between writes, and once it answers True nothing is kept."""

    def read_request(self, batch_id: UUID, idx: int) -> bytes:
        """Item IDX's request body; PayloadMissing when it cannot be read here."""

    def append_response(self, batch_id: UUID, idx: int, body: bytes) -> ResponseRef:
        """Keep item IDX's response; durable only after sync()."""

    def sync(self) -> None:
        """Make every response kept so far durable, or raise PayloadStoreUnavailable."""

    def read_response(self, batch_id: UUID, idx: int, ref: ResponseRef | None) -> bytes | None:
        """Item IDX's stored response, None when it is not visible here."""

    def read_responses(self, batch_id: UUID, items: Sequence[Wanted]) -> Found:
        """read_response of many ITEMS at once, in their order."""

    def remove_batch(self, batch_id: UUID) -> bool:
        """Remove everything a batch keeps; whether nothing of it is left."""

    def batches(self) -> Iterator[tuple[UUID, float]]:
        """Every batch something is kept for (whole or not), with the time it was last written (epoch seconds)."""

    def close(self) -> None:
        """Make what was kept durable (best effort) and let go of what the store holds open."""


_Range = TypeVar("_Range", bound=tuple[Any, ...])


def spans(ranges: Iterable[_Range]) -> Iterator[tuple[int, int, list[_Range]]]:
    """RANGES (offset, length, ...: a position, or what the caller places), sorted, grouped into spans worth one read
    each: (start, end, ranges)."""
    span: list[_Range] = []
    start = end = 0
    for item in ranges:
        offset, length = item[0], item[1]
        if span and (offset - end > SPAN_GAP or offset + length - start > SPAN_MAX):
            yield start, end, span
            span = []
        if not span:
            start = end = offset
        span.append(item)
        if offset + length > end:
            end = offset + length
    if span:
        yield start, end, span


# A span of a segment placed in the object that holds it (a pack), as spans() takes it: its start there, its
# length, the segment, the segment's base there, and the span's (offset in the segment, length, position) ranges.
Placed = tuple[int, int, str, int, list[tuple[int, int, int]]]


def by_segment(items: Sequence[Wanted]) -> tuple[dict[str, list[tuple[int, int, int]]], list[tuple[int, int]]]:
    """ITEMS grouped per segment as sorted (offset, length, position) ranges, and the (position, idx) of those
    without a segment."""
    grouped: dict[str, list[tuple[int, int, int]]] = {}
    bare: list[tuple[int, int]] = []
    for pos, (idx, segment, offset, length) in enumerate(items):
        if segment is None or offset is None or length is None:
            bare.append((pos, idx))
        else:
            grouped.setdefault(segment, []).append((offset, length, pos))
    for ranges in grouped.values():
        ranges.sort()
    return grouped, bare


def slice_span(data: bytes, start: int, span: list[tuple[int, int, int]], found: Found) -> None:
    """Put each (offset, length, position) of SPAN, read as DATA from START, into FOUND: as bytes, which the
    garbage collector never tracks (a memoryview per item made it scan a results page over and over)."""
    for offset, length, pos in span:
        found[pos] = data[offset - start:offset - start + length]


def process_token() -> str:
    """Names a process's response segments: its pid and a random part (pids are reused across restarts and hosts)."""
    return f"{os.getpid():x}-{secrets.token_hex(4)}"
