"""The batch item file store: one request file and one response file per item under RELAY_BATCH_PAYLOAD_DIR.

Layout: `<dir>/<batch_id>/<idx>.request.json` and `<dir>/<batch_id>/<idx>.response.json`.
A batch's request files are written into `<dir>/.staging/<batch_id>` and the directory is renamed into
place once every file is complete, so no reader ever sees a half-written file; one `os.sync()` makes them
durable before the batch is committed. Response files are written one by one (temp file, fdatasync,
`os.replace`).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from app.errors import InsufficientStorage


class PayloadStoreUnavailable(InsufficientStorage):
    """The payload directory cannot be written (missing, read-only, full)."""

    code = "payload_store_unavailable"


class PayloadMissing(Exception):
    """An item's file is not visible to this replica (or cannot be read)."""


@dataclass(frozen=True)
class ResponseRef:
    """Where an item's response is kept: a file of the batch's folder and the byte range in it."""

    segment: str
    offset: int
    length: int


class PayloadStore:
    """Reads and writes item files; every method is safe to call from several threads."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._tmp_counter = 0
        self._lock = threading.Lock()

    def batch_dir(self, batch_id: UUID) -> Path:
        return self.root / str(batch_id)

    def request_path(self, batch_id: UUID, idx: int) -> Path:
        return self.batch_dir(batch_id) / f"{idx}.request.json"

    def response_path(self, batch_id: UUID, idx: int) -> Path:
        return self.batch_dir(batch_id) / f"{idx}.response.json"

    def write_requests(self, batch_id: UUID, bodies: Iterable[bytes]) -> None:
        """Write every request file of a new batch, publish them at once (rename) and sync them to disk."""
        staging = self.root / ".staging" / str(batch_id)
        try:
            staging.mkdir(parents=True)
            for idx, body in enumerate(bodies):
                fd = os.open(staging / f"{idx}.request.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    _write_all(fd, body)
                finally:
                    os.close(fd)
            os.rename(staging, self.batch_dir(batch_id))
            os.sync()
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PayloadStoreUnavailable(message=f"cannot write batch payload files: {exc.strerror or exc}") from exc

    def remove_batch(self, batch_id: UUID) -> None:
        """Best-effort removal of a batch's files (used when its commit failed)."""
        shutil.rmtree(self.batch_dir(batch_id), ignore_errors=True)

    def read_request(self, batch_id: UUID, idx: int) -> bytes:
        """The request body of an item; PayloadMissing when this replica cannot see it."""
        return self._read(self.request_path(batch_id, idx))

    def read_response(self, batch_id: UUID, idx: int) -> bytes | None:
        """The stored response body of an item, or None when it is not visible here."""
        try:
            return self._read(self.response_path(batch_id, idx))
        except PayloadMissing:
            return None

    def append_response(self, batch_id: UUID, idx: int, body: bytes) -> ResponseRef:
        """Keep an item's response; its ref is committed with the item's final state after sync()."""
        self.write_response(batch_id, idx, body)
        return ResponseRef(self.response_path(batch_id, idx).name, 0, len(body))

    def sync(self) -> None:
        """Make every response appended so far durable (each response file is synced as it is written)."""

    def write_response(self, batch_id: UUID, idx: int, body: bytes) -> None:
        """Store an item's response whole and durably; PayloadStoreUnavailable when it cannot be written."""
        final = self.response_path(batch_id, idx)
        with self._lock:
            self._tmp_counter += 1
            tmp = final.with_name(f".{idx}.{os.getpid()}.{threading.get_ident()}.{self._tmp_counter}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, body)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PayloadStoreUnavailable(message=f"cannot write the response file: {exc.strerror or exc}") from exc

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise PayloadMissing(f"{path.name}: {exc.strerror or exc}") from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
