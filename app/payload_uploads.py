"""Uploaded files' bytes on the folder store (the payload port's uploads): `<RELAY_BATCH_PAYLOAD_DIR>/files/<id>`,
written under `files/.staging/` and renamed into place once complete and synced, so no reader ever sees half a
file; through the payload store's write path (app/payload_files.WritePath), so with RELAY_BATCH_PAYLOAD_MODE's
modes like every file Relay keeps."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import IO
from uuid import UUID

from app.payload_files import WritePath
from app.payload_port import FileBytesMissing, FileStoreUnavailable, StagedFile

__all__ = ["FileBytesMissing", "FileDisk", "FileStoreUnavailable", "StagedFile"]


class FileDisk:
    """Stages, publishes, opens and removes uploaded files; safe to use from several threads."""

    def __init__(self, payload_dir: str | os.PathLike[str], *, mode: int) -> None:
        self.root = Path(payload_dir) / "files"
        self._write = WritePath(mode)

    def path(self, file_id: UUID) -> Path:
        return self.root / str(file_id)

    def stage(self) -> StagedFile:
        """A new empty file under the staging folder, open for writing and reading."""
        staging = self.root / ".staging"
        try:
            self._write.make_dir(staging)
            path = staging / f"{uuid.uuid4()}.part"
            handle = os.fdopen(self._write.create(path, readable=True), "w+b")  # closed by publish or discard
            return StagedFile(path, handle)
        except OSError as exc:
            raise FileStoreUnavailable(message=f"cannot store the file: {exc.strerror or exc}") from exc

    def publish(self, staged: StagedFile, file_id: UUID) -> None:
        """Sync the staged file and move it to its final name."""
        try:
            staged.handle.flush()
            os.fdatasync(staged.handle.fileno())
            staged.handle.close()
            self._write.publish(staged.path, self.path(file_id))
        except OSError as exc:
            self.discard(staged)
            raise FileStoreUnavailable(message=f"cannot store the file: {exc.strerror or exc}") from exc

    @staticmethod
    def discard(staged: StagedFile) -> None:
        """Close and remove a staged file that will not be published."""
        staged.handle.close()
        staged.path.unlink(missing_ok=True)

    def open(self, file_id: UUID) -> IO[bytes]:
        """The published file, open for reading; FileBytesMissing when this replica cannot see it."""
        try:
            return open(self.path(file_id), "rb")
        except OSError as exc:
            raise FileBytesMissing(f"{file_id}: {exc.strerror or exc}") from exc

    def remove(self, file_id: UUID) -> None:
        """Best-effort removal of a published file."""
        self.path(file_id).unlink(missing_ok=True)
