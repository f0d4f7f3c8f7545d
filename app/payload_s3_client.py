"""The S3 store's client and how it reads a failed call: boto3 set up for S3-compatible servers, and the errors
(app/payload_s3.py and its uploads and packs share them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol
from uuid import UUID

from app.payload_files import IncompleteFile

if TYPE_CHECKING:
    from app.payload_files import WritePath
    from app.payload_s3_spool import Spool
    from app.settings import Settings


class Bucket(Protocol):
    """What the S3 store's uploads and packs use of it (app/payload_s3.S3Store)."""

    client: Any
    bucket: str
    prefix: str
    failures: tuple[type[Exception], ...]
    staging: Path
    write_path: WritePath
    spool: Spool | None

    def key(self, batch_id: UUID, name: str) -> str: ...

    def object_name(self, kind: str, suffix: str) -> str: ...

    def put_new(self, key: str, body: bytes) -> None: ...

    def get(self, key: str, offset: int, length: int) -> bytes: ...

    def removed(self, batch_id: UUID) -> bool: ...

    def delete_keys(self, keys: list[str]) -> None: ...

    def drop_packed(self, batch_id: UUID, segments: list[str], pack: str | None = None) -> None: ...

    def list_keys(self, prefix: str) -> Iterator[tuple[str, float]]: ...

    def staged_file(self) -> IO[bytes]: ...


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


def failures() -> tuple[type[Exception], ...]:
    """What a failed call to the object store raises (botocore's and boto3's errors; OSError of local staging)."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError, Boto3Error, OSError


def passing(exc: Exception) -> bool:
    """Whether a failed call may succeed if tried again: the store unreachable or answering 5xx (not a 4xx)."""
    code = status(exc)
    return code >= 500 or (code == 0 and not isinstance(exc, IncompleteFile))


def status(exc: Exception) -> int:
    """The HTTP status a failed call was answered with (0: none, such as a connection the server closed)."""
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def reason(exc: BaseException) -> str:
    """A failure in a few words, for an error's message."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
