"""The payload store's files: the request file format and the response segment writer (the cache of open read
descriptors is `app/payload_fds.py`). `app/payloads.py` puts them together; nothing here knows about batches or
Postgres.

A request file is every item's body back to back, then a fixed-width index of n + 1 little-endian uint64 offsets
(item i is bytes offsets[i]:offsets[i+1]), then a 16-byte trailer: uint64 n and the magic `RLYREQ01`. The trailer
is written last, so a file cut short is recognised as incomplete instead of being misread.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from itertools import accumulate, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

    class Body(Buffer, Sized, Protocol):
        """A request body: any object with the buffer protocol and a length in bytes (bytes, memoryview of
        bytes, msgspec.Raw)."""

MAGIC = b"RLYREQ01"
_TRAILER = struct.Struct("<Q8s")
TRAILER_SIZE = _TRAILER.size
_SPAN = struct.Struct("<QQ")
_GATHER = min(1024, os.sysconf("SC_IOV_MAX"))  # request bodies per gathered write (the system's limit: 1024 on Linux)
SYNC_FAILURE_HOLD_S = 60.0  # how long a failed segment sync keeps failing every sync() of the process


class IncompleteFile(OSError):
    """A request file without its trailer (cut short, or not a request file at all)."""


def write_request_file(fd: int, bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) -> None:
    """Write BODIES, their index and the trailer to FD (request_file_parts). Bodies go out in gathered writes
    straight from their buffers (no copy of the batch in memory), a slice of BODIES each when it is a sequence.
    ABANDONED is asked before each write: Abandoned is raised once it answers True."""
    for buffers, size in request_file_parts(bodies, abandoned):
        writev_all(fd, buffers, size)


def request_file_parts(bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) \
        -> Iterator[tuple[Sequence[Body], int]]:
    """The request file of BODIES in order, as (buffers, their size in bytes): the bodies a gathered
    write at a time, then the index and the trailer. ABANDONED is asked before each: Abandoned once it answers
    True."""
    offsets = array("Q", [0])
    yield from request_bodies(bodies, offsets, abandoned)
    index, trailer = offsets_bytes(offsets), _TRAILER.pack(len(offsets) - 1, MAGIC)
    yield [index, trailer], len(index) + len(trailer)


def request_bodies(bodies: Iterable[Body], offsets: array[int], abandoned: Callable[[], bool] | None = None) \
        -> Iterator[tuple[Sequence[Body], int]]:
    """BODIES a gathered write at a time, as (buffers, their size in bytes), each body's end appended to OFFSETS
    (which holds the first one's start). ABANDONED is asked before each: Abandoned once it answers True."""
    for chunk in _gathered(bodies):
        if abandoned is not None and abandoned():
            raise Abandoned("the request file was abandoned")
        start = offsets[-1]
        offsets.extend(islice(accumulate(map(len, chunk), initial=start), 1, None))
        yield chunk, offsets[-1] - start


def offsets_bytes(offsets: array[int]) -> bytes:
    """A request file's index as stored: OFFSETS as little-endian uint64 (parse_offsets reads it back)."""
    if sys.byteorder == "big":
        offsets = array("Q", offsets)
        offsets.byteswap()
    return offsets.tobytes()


class Abandoned(OSError):
    """The writer of a request file was told to give up (its file is not complete)."""


def _gathered(bodies: Iterable[Body]) -> Iterator[Sequence[Body]]:
    if isinstance(bodies, Sequence):
        for start in range(0, len(bodies), _GATHER):
            yield bodies[start:start + _GATHER]
        return
    items = iter(bodies)
    while chunk := list(islice(items, _GATHER)):
        yield chunk


@dataclass(frozen=True)
class RequestIndex:
    """Where an open request file keeps its index."""

    count: int
    index_at: int


def read_request_index(fd: int) -> RequestIndex:
    """Check the trailer of an open request file; IncompleteFile when it is not a whole request file."""
    size = os.fstat(fd).st_size
    if size < TRAILER_SIZE:
        raise IncompleteFile("the request file is incomplete")
    return parse_trailer(pread_exact(fd, TRAILER_SIZE, size - TRAILER_SIZE), size)


def parse_trailer(trailer: bytes, size: int) -> RequestIndex:
    """The index of a request file of SIZE bytes that ends with TRAILER; IncompleteFile if it is not one."""
    if len(trailer) != TRAILER_SIZE:
        raise IncompleteFile("the request file is incomplete")
    count, magic = _TRAILER.unpack(trailer)
    index_at = size - _TRAILER.size - 8 * (count + 1)
    if magic != MAGIC or index_at < 0:
        raise IncompleteFile("the request file is incomplete")
    return RequestIndex(count, index_at)


def parse_offsets(data: bytes) -> array[int]:
    """A request file's index (its n + 1 offsets) read as numbers."""
    offsets = array("Q", data)
    if sys.byteorder == "big":
        offsets.byteswap()
    return offsets


def read_request_body(fd: int, index: RequestIndex, idx: int) -> bytes:
    start, end = _SPAN.unpack(pread_exact(fd, _SPAN.size, index.index_at + 8 * idx))
    return pread_exact(fd, end - start, start)


def write_all(fd: int, data: Buffer) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def writev_all(fd: int, buffers: Sequence[Body], size: int) -> None:
    """Write BUFFERS (SIZE bytes in all) in order with as few system calls as the kernel allows."""
    written = os.writev(fd, buffers) if buffers else 0
    if written == size:
        return
    for body in buffers:  # a short write (rare on regular files): finish byte by byte from where it stopped
        if written >= len(body):
            written -= len(body)
            continue
        write_all(fd, memoryview(body)[written:])
        written = 0


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def pread_exact(fd: int, size: int, offset: int) -> bytes:
    """SIZE bytes at OFFSET; ShortRead when the file ends first."""
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ShortRead(f"expected {size} bytes at offset {offset}, the file has {len(data)}")
    return data


class ShortRead(OSError):
    """The file is shorter than a recorded byte range (not written there, or not yet visible to this client)."""


def fsync_dir(path: Path) -> None:
    """Make the entries of directory PATH (a create or rename in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def directory_mode(file_mode: int) -> int:
    """The folders' mode for FILE_MODE: the owner's rwx, and search wherever reading is granted."""
    return file_mode | 0o700 | ((file_mode & 0o444) >> 2)


class WritePath:
    """The one way Relay writes the files it keeps (batch payloads and uploaded files): folders and files get
    RELAY_BATCH_PAYLOAD_MODE's modes whatever the umask (set again after creating), and a file is written whole
    under a staging name, synced, renamed into place and its folder synced, so no reader ever sees half of it."""

    def __init__(self, file_mode: int) -> None:
        self.file_mode, self.dir_mode = file_mode, directory_mode(file_mode)

    def make_dir(self, path: Path) -> None:
        """PATH and any missing parent, each with the folders' mode and its entry synced in its parent (an existing
        folder is left as it is)."""
        if path.is_dir():
            return
        self.make_dir(path.parent)
        try:
            os.mkdir(path, self.dir_mode)
        except FileExistsError:  # made meanwhile by another thread or process
            return
        os.chmod(path, self.dir_mode)
        fsync_dir(path.parent)

    def new_dir(self, path: Path) -> None:
        """A new folder PATH (FileExistsError if there is one), with the folders' mode; its parent exists."""
        os.mkdir(path, self.dir_mode)
        os.chmod(path, self.dir_mode)

    def create(self, path: Path, *, readable: bool = False) -> int:
        """A new file PATH (FileExistsError if there is one), open for writing (and reading if READABLE), with the
        files' mode."""
        access = os.O_RDWR if readable else os.O_WRONLY
        fd = os.open(path, access | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self.file_mode)
        try:
            os.fchmod(fd, self.file_mode)
        except OSError:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def publish(staged: Path, final: Path) -> None:
        """Rename STAGED (a synced file, or a folder whose entries are synced) to FINAL, durably."""
        os.rename(staged, final)
        fsync_dir(final.parent)


class Segment:
    """One process's response file for one batch: threads reserve byte ranges under a lock and write them in
    parallel; sync() makes every append completed before it durable, one fdatasync shared by concurrent callers."""

    def __init__(self, fd: int, name: str, end: int) -> None:
        self.fd, self.name, self.end = fd, name, end
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self.writing = 0
        self.appended = 0  # appends whose bytes are written (to the page cache at least)
        self.synced = 0  # appends known to be durable
        self.failed_at: float | None = None  # monotonic time of a failed fdatasync: the bytes' fate is unknown

    def reserve(self, length: int) -> int:
        """The offset of the next LENGTH bytes; the segment counts as being written until write() returns."""
        with self._lock:
            offset, self.end = self.end, self.end + length
            self.writing += 1
        return offset

    def write(self, body: bytes, offset: int) -> None:
        """Write BODY at its reserved OFFSET. Not durable until sync()."""
        written = False
        try:
            pwrite_all(self.fd, body, offset)
            written = True
        finally:
            with self._lock:
                self.writing -= 1
                if written:
                    self.appended += 1

    @property
    def clean(self) -> bool:
        return self.writing == 0 and self.synced == self.appended and self.failed_at is None

    def sync(self) -> None:
        with self._sync_lock:
            if self.failed_at is not None:
                raise OSError(f"an earlier sync of {self.name} failed")
            target = self.appended  # appends completed before this fdatasync starts
            if self.synced >= target:
                return
            try:
                os.fdatasync(self.fd)
            except OSError:
                self.failed_at = time.monotonic()
                raise
            self.synced = target


class Segments:
    """This process's open segments by batch, least recently used closed first once clean. A segment whose sync
    failed is replaced for new appends and kept for SYNC_FAILURE_HOLD_S: appends made to it before the failure
    may still be waiting for a sync(), which must fail rather than let their refs be committed."""

    def __init__(self, capacity: int, opener: Callable[[Any, int], Segment]) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[Any, Segment] = OrderedDict()
        self._failed: list[Segment] = []
        self._generation = 0
        self._capacity, self._opener = capacity, opener

    def append(self, key: Any, body: bytes) -> tuple[str, int]:
        """Append BODY to KEY's segment; (segment name, offset). The range is reserved under the lock, so the
        segment cannot be closed for room before the bytes are written."""
        with self._lock:
            segment = self._get(key)
            offset = segment.reserve(len(body))
        segment.write(body, offset)
        return segment.name, offset

    def _get(self, key: Any) -> Segment:
        segment = self._open.get(key)
        if segment is not None and segment.failed_at is None:
            self._open.move_to_end(key)
            return segment
        if segment is not None:
            self._failed.append(self._open.pop(key))
            self._generation += 1
        segment = self._open[key] = self._opener(key, self._generation)
        self._evict(keep=key)
        return segment

    def unsynced(self) -> list[Segment]:
        """Segments holding appends not yet known durable (failed ones during their hold, then forgotten)."""
        with self._lock:
            now = time.monotonic()
            expired = [s for s in self._failed if now - (s.failed_at or now) >= SYNC_FAILURE_HOLD_S]
            for segment in expired:
                self._failed.remove(segment)
                close_quietly(segment.fd)
            return [s for s in (*self._failed, *self._open.values()) if not s.clean]

    def forget(self, key: Any) -> None:
        """Close KEY's segment (its batch is being removed)."""
        with self._lock:
            segment = self._open.pop(key, None)
        if segment is not None:
            close_quietly(segment.fd)

    def close(self) -> None:
        with self._lock:
            segments = [*self._failed, *self._open.values()]
            self._open.clear()
            self._failed.clear()
        for segment in segments:
            close_quietly(segment.fd)

    def _evict(self, keep: Any) -> None:
        """Close the least recently used clean segments beyond capacity (never KEEP's, just opened)."""
        extra = len(self._open) - self._capacity
        for key in [k for k, s in self._open.items() if s.clean and k != keep][:max(0, extra)]:
            close_quietly(self._open.pop(key).fd)


def close_quietly(fd: int) -> None:
    """Close FD, whatever happens."""
    try:
        os.close(fd)
    except OSError:
        pass
