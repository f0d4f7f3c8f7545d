"""The folder payload store: a few files per batch under RELAY_BATCH_PAYLOAD_DIR, whatever its size.

`<dir>/<batch_id>/` holds:
- `requests.bin`: every item's request body, an offset index and a trailer (format in `app/payload_files.py`).
  It is written in `<dir>/.staging/<batch_id>/`, synced once (the file, then the folder), and published by
  renaming the folder into place, so a crash mid-write leaves nothing visible.
- `responses-<process>-<n>.seg`: the responses one worker process appended, back to back. An item's
  (segment, offset, length) is committed with its final state only after `sync()` made the bytes durable, and
  readers read only committed ranges, so a crash mid-append never exposes a partial response.
- `<idx>.request.json` / `<idx>.response.json`: the older one-file-per-item layout, still read.

Files are created with mode RELAY_BATCH_PAYLOAD_MODE (0600 by default), folders with the same mode plus the
search bit wherever it grants reading (0700).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from app.payload_fds import OpenFiles
from app.payload_files import (
    RequestIndex,
    Segment,
    Segments,
    ShortRead,
    WritePath,
    fsync_dir,
    pread_exact,
    read_request_body,
    read_request_index,
    write_request_file,
)
from app.payload_port import (
    SEGMENT_NAME,
    Found,
    PayloadMissing,
    PayloadStoreUnavailable,
    ResponseRef,
    Wanted,
    by_segment,
    process_token,
    slice_span,
    spans,
)
from app.payload_uploads import FileDisk

if TYPE_CHECKING:
    from app.payload_files import Body

STAGING = ".staging"
REQUESTS_FILE = "requests.bin"
DEFAULT_MODE = 0o600
_OPEN_FILES = 64  # read descriptors kept open per process (request files and segments)
_OPEN_SEGMENTS = 32  # segments kept open for appending per process, beyond those not yet synced
__all__ = ["FolderStore", "PayloadMissing", "PayloadStoreUnavailable", "ResponseRef", "Wanted"]


class FolderStore:
    """The payload port on a folder (app/payload_port.PayloadStore): the embedded default."""

    def __init__(self, root: str | os.PathLike[str], *, mode: int = DEFAULT_MODE) -> None:
        self.root = Path(root)
        self.write_path = WritePath(mode)
        self.uploads = FileDisk(self.root, mode=mode)
        self._files = OpenFiles(_OPEN_FILES, self._path_of)
        self._segments = Segments(_OPEN_SEGMENTS, self._open_segment)
        self._pid, self._token = os.getpid(), process_token()

    def batch_dir(self, batch_id: UUID) -> Path:
        return self.root / str(batch_id)

    # requests ----------------------------------------------------------------------------------------------------

    def write_requests(self, batch_id: UUID, bodies: Iterable[Body], abandoned: Callable[[], bool] | None = None) \
            -> None:
        """Write a new batch's request file, sync it once and publish its folder whole (rename). ABANDONED is asked
        between writes: once it answers True the write fails (PayloadStoreUnavailable) and nothing is published."""
        staging = self.root / STAGING / str(batch_id)
        try:
            self.write_path.make_dir(staging.parent)
            self.write_path.new_dir(staging)
            fd = self.write_path.create(staging / REQUESTS_FILE)
            try:
                write_request_file(fd, bodies, abandoned)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            fsync_dir(staging)
            self.write_path.publish(staging, self.batch_dir(batch_id))
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PayloadStoreUnavailable(message=f"cannot write the batch's request file: {exc.strerror or exc}") \
                from exc

    def read_request(self, batch_id: UUID, idx: int) -> bytes:
        """Item IDX's request body; PayloadMissing when this replica cannot see it."""
        try:
            return self._files.read((batch_id, REQUESTS_FILE), lambda fd, index: _request_body(fd, index, idx),
                                    read_request_index)
        except FileNotFoundError:
            pass  # no request file: the older layout, or nothing visible here
        except OSError as exc:
            raise PayloadMissing(f"{REQUESTS_FILE}: {exc.strerror or exc}") from exc
        return _read_whole(self.batch_dir(batch_id) / f"{idx}.request.json")

    # responses ---------------------------------------------------------------------------------------------------

    def append_response(self, batch_id: UUID, idx: int, body: bytes) -> ResponseRef:
        """Append item IDX's response to this process's segment of the batch; durable only after sync()."""
        if os.getpid() != self._pid:  # a forked child must not append to its parent's segments
            self._segments = Segments(_OPEN_SEGMENTS, self._open_segment)
            self._files = OpenFiles(_OPEN_FILES, self._path_of)
            self._pid, self._token = os.getpid(), process_token()
        try:
            name, offset = self._segments.append(batch_id, body)
        except OSError as exc:
            raise PayloadStoreUnavailable(message=f"cannot write the response: {exc.strerror or exc}") from exc
        return ResponseRef(name, offset, len(body))

    def sync(self) -> None:
        """Make every response this process appended so far durable (one fdatasync per segment written to)."""
        for segment in self._segments.unsynced():
            try:
                segment.sync()
            except OSError as exc:
                raise PayloadStoreUnavailable(message=f"cannot sync the responses: {exc.strerror or exc}") from exc

    def read_response(self, batch_id: UUID, idx: int, ref: ResponseRef | None) -> bytes | None:
        """Item IDX's stored response (REF None: the older layout's file), or None when it is not visible here."""
        if ref is None:
            try:
                return _read_whole(self.batch_dir(batch_id) / f"{idx}.response.json").strip()
            except PayloadMissing:
                return None
        return self._read_range(batch_id, ref)

    def read_responses(self, batch_id: UUID, items: Sequence[Wanted]) -> Found:
        """read_response for many ITEMS at once, in their order: each segment read in a few large spans."""
        found: Found = [None] * len(items)
        grouped, bare = by_segment(items)
        for pos, idx in bare:
            found[pos] = self.read_response(batch_id, idx, None)
        for segment, ranges in grouped.items():
            for start, end, span in spans(ranges):
                self._read_span(batch_id, segment, start, end, span, found)
        return found

    # retention ---------------------------------------------------------------------------------------------------

    def remove_batch(self, batch_id: UUID) -> bool:
        """Remove a batch's folder (and any staging leftover of it); whether nothing of it is left."""
        folder = self.batch_dir(batch_id)
        self._segments.forget(batch_id)
        self._files.drop(batch_id)
        paths = (folder, self.root / STAGING / str(batch_id))
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        return not any(path.exists() for path in paths)

    def batches(self) -> Iterator[tuple[UUID, float]]:
        """Every batch folder, published or staging, by batch id with its modification time (what `relay batches
        purge` checks for strays)."""
        for parent in (self.root, self.root / STAGING):
            try:
                entries = list(os.scandir(parent))
            except OSError:
                continue
            for entry in entries:
                try:
                    batch_id = UUID(entry.name)
                    yield batch_id, entry.stat().st_mtime
                except (ValueError, OSError):
                    continue

    def close(self) -> None:
        """Sync what this process appended (best effort) and close every descriptor."""
        try:
            self.sync()
        except PayloadStoreUnavailable:
            pass
        self._segments.close()
        self._files.close()

    # internals ---------------------------------------------------------------------------------------------------

    def _open_segment(self, batch_id: UUID, generation: int) -> Segment:
        """Open (or create, durably named) this process's segment of a batch; never creates the batch's folder."""
        name = f"responses-{self._token}-{generation}.seg"
        path = self.batch_dir(batch_id) / name
        try:
            fd = self.write_path.create(path)
        except FileExistsError:  # reopened after it was closed for room
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            return Segment(fd, name, os.fstat(fd).st_size)
        try:
            fsync_dir(path.parent)
        except OSError:
            os.close(fd)
            raise
        return Segment(fd, name, 0)

    def _path_of(self, key: tuple[UUID, str]) -> str:
        return os.path.join(self.root, str(key[0]), key[1])

    def _read_range(self, batch_id: UUID, ref: ResponseRef) -> bytes | None:
        if not SEGMENT_NAME.fullmatch(ref.segment) or ref.offset < 0 or ref.length < 0:
            return None
        for _ in range(2):
            try:
                return self._files.read((batch_id, ref.segment), lambda fd, _: pread_exact(fd, ref.length, ref.offset))
            except ShortRead:
                self._files.drop(batch_id, ref.segment)  # reopen once: a network filesystem checks the size on open
            except OSError:
                return None
        return None

    def _read_span(self, batch_id: UUID, segment: str, start: int, end: int, span: list[tuple[int, int, int]],
                   found: Found) -> None:
        """Read START:END of SEGMENT once and slice each (offset, length, position) of SPAN out of it (range by
        range if part of it is not readable)."""
        data = self._read_range(batch_id, ResponseRef(segment, start, end - start))
        if data is None:
            for offset, length, pos in span:
                found[pos] = self._read_range(batch_id, ResponseRef(segment, offset, length))
            return
        slice_span(data, start, span, found)


def _request_body(fd: int, index: RequestIndex, idx: int) -> bytes:
    if not 0 <= idx < index.count:
        raise PayloadMissing(f"item {idx} is not in the request file ({index.count} items)")
    return read_request_body(fd, index, idx)


def _read_whole(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise PayloadMissing(f"{path.name}: {exc.strerror or exc}") from exc

