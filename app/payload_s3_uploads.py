"""The OpenAI Files API's uploads on the S3 store: `files/<file_id>` in the bucket, staged on this replica's own
disk while received, then uploaded whole (a failed multipart upload is aborted: nothing half-written is visible)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO
from uuid import UUID

from app.payload_port import FileBytesMissing, FileStoreUnavailable, StagedFile
from app.payload_s3_client import Bucket, reason

FILES = "files/"


class S3Uploads:
    """The OpenAI Files API's uploads in the bucket, under `files/`."""

    def __init__(self, store: Bucket) -> None:
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
            raise FileStoreUnavailable(message=f"cannot store the file: {reason(exc)}") from exc
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
            raise FileBytesMissing(f"{file_id}: {reason(exc)}") from exc

    def remove(self, file_id: UUID) -> None:
        try:
            self.store.client.delete_object(Bucket=self.store.bucket, Key=self._key(file_id))
        except self.store.failures:
            pass  # best effort, like the folder store's
