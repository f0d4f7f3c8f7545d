"""Which payload backend a process uses: RELAY_PAYLOAD_BACKEND's, built once per process (`Runtime.service`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.payload_port import PayloadStore
from app.payloads import FolderStore
from app.runtime import Runtime
from app.settings import Settings

if TYPE_CHECKING:
    from app.payload_s3_spool import PoolOf


def open_payload_store(settings: Settings, pool_of: PoolOf | None = None) -> PayloadStore:
    """The folder store under RELAY_BATCH_PAYLOAD_DIR (the default), or the S3 store of RELAY_S3_BUCKET (which
    stages what it uploads in RELAY_BATCH_PAYLOAD_DIR, this replica's own, and keeps responses durable until packed
    in the response spool of POOL_OF's database: without one, a small object per group commit)."""
    if settings.payload_backend == "s3":
        from app.payload_s3 import S3Store, s3_client
        from app.payload_s3_spool import Spool

        return S3Store(s3_client(settings), settings.s3_bucket, settings.s3_prefix,
                       f"{settings.batch_payload_dir}/.staging", mode=settings.payload_file_mode,
                       spool=None if pool_of is None else Spool(pool_of))
    return FolderStore(settings.batch_payload_dir, mode=settings.payload_file_mode)


def payload_store(runtime: Runtime) -> PayloadStore:
    """This process's payload store (one per runtime): batches' requests and responses, and uploads."""
    return runtime.service("payloads", lambda: open_payload_store(runtime.settings, lambda: runtime.pool))
