"""A new object written to the bucket as its bytes are produced: the S3 store's request files (app/payload_s3.py).

The bytes are cut into parts of PART bytes, each handed to one of UPLOADERS background threads that upload the
parts of one multipart upload while the next is filled, so the upload overlaps whatever produces the bytes instead
of following it; memory stays bounded (the part being filled, one waiting and one on the wire per uploader). An
object smaller than a part is one PUT. Nothing is visible before complete() (S3 shows a multipart upload's object
only once it is completed); a failure or abort() aborts the upload, so neither an object nor an open upload is
left (an abort the store cannot answer, down meanwhile, leaves an open upload: no object, and the bucket's
lifecycle rule for incomplete multipart uploads removes it).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from app.payload_s3_client import Bucket

if TYPE_CHECKING:
    from app.payload_files import Body

PART = 8 * 1024 * 1024  # bytes per part (S3's smallest part but the last is 5 MiB)
UPLOADERS = 4  # parts on the wire at once (one S3 server answers a few parallel parts faster than one after another)


class ObjectStream:
    """Write a new object KEY of STORE's bucket piece by piece (write), then complete() it or abort() it."""

    def __init__(self, store: Bucket, key: str) -> None:
        self.store, self.key = store, key
        self._part = bytearray()
        self._parts: queue.Queue[tuple[int, bytearray] | None] = queue.Queue(maxsize=1)
        self._uploaded: list[dict[str, Any]] = []
        self._upload_id: str | None = None
        self._failure: BaseException | None = None
        self._stop = False
        self._sent = 0
        self._uploaders: list[threading.Thread] = []

    def write(self, buffers: Iterable[Body]) -> None:
        """Add BUFFERS' bytes; each full part goes to the uploaders (waiting while one already waits). What an
        uploader failed with is raised here, so a producer stops early."""
        for buffer in buffers:
            self._part += buffer
        while len(self._part) >= PART:
            full, self._part = self._part, self._part[PART:]
            del full[PART:]
            self._send(full)

    def complete(self) -> None:
        """Upload what is left and make the object visible whole: one PUT when it never filled a part, else the
        last part and the multipart upload's completion."""
        if self._upload_id is None:
            self.store.client.put_object(Bucket=self.store.bucket, Key=self.key, Body=bytes(self._part))
            return
        if self._part:
            self._send(self._part)
        self._finish()
        parts = sorted(self._uploaded, key=lambda part: int(part["PartNumber"]))
        self.store.client.complete_multipart_upload(Bucket=self.store.bucket, Key=self.key, UploadId=self._upload_id,
                                                    MultipartUpload={"Parts": parts})

    def abort(self) -> None:
        """Give up: the uploaders stop, and the multipart upload (if one was begun) is aborted, best effort."""
        self._stop = True
        with contextlib.suppress(BaseException):
            self._finish()
        if self._upload_id is not None:
            with contextlib.suppress(*self.store.failures):
                self.store.client.abort_multipart_upload(Bucket=self.store.bucket, Key=self.key,
                                                         UploadId=self._upload_id)

    def _send(self, part: bytearray) -> None:
        """Hand PART to the uploaders (the multipart upload begun, and they started, with the first)."""
        if self._upload_id is None:
            self._upload_id = self.store.client.create_multipart_upload(Bucket=self.store.bucket,
                                                                        Key=self.key)["UploadId"]
            self._uploaders = [threading.Thread(target=self._upload_parts, name="relay-s3-upload", daemon=True)
                               for _ in range(UPLOADERS)]
            for uploader in self._uploaders:
                uploader.start()
        if self._failure is not None:
            raise self._failure
        self._sent += 1
        self._parts.put((self._sent, part))

    def _finish(self) -> None:
        """Wait for the uploaders to be done with every part sent; raise what one failed with."""
        for _ in self._uploaders:
            self._parts.put(None)
        for uploader in self._uploaders:
            uploader.join()
        self._uploaders = []
        if self._failure is not None:
            raise self._failure

    def _upload_parts(self) -> None:
        """An uploader: upload each part taken until None (after a failure, or once stopped, the parts are only
        taken, so that the producer never waits on a full queue)."""
        while (taken := self._parts.get()) is not None:
            if self._failure is not None or self._stop:
                continue
            number, part = taken
            try:
                answer = self.store.client.upload_part(Bucket=self.store.bucket, Key=self.key,
                                                       UploadId=self._upload_id, PartNumber=number, Body=part)
                self._uploaded.append({"PartNumber": number, "ETag": answer["ETag"]})
            except Exception as exc:  # raised again in the producer's thread
                self._failure = exc
