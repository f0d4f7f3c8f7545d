"""Page cursors: an opaque position in a (created_at, id) newest-first order, and the one error for a cursor this
API did not hand out (`400 invalid_request`, as docs/usage.md documents)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from app.errors import ValidationFailed

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidCursor(ValidationFailed):
    """The `cursor` argument is not one this API handed out."""


def _unpad(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _pad(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode_cursor(created_at: datetime, row_id: UUID) -> str:
    """A page cursor naming a row by (created_at, uuid id): the batch lists' and the webhook deliveries'."""
    return _unpad(f"{created_at.isoformat()}|{row_id}".encode())


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """The (created_at, id) of encode_cursor's CURSOR; InvalidCursor (400) for anything else."""
    try:
        stamp, _, ident = _pad(cursor).decode().partition("|")
        return datetime.fromisoformat(stamp), UUID(ident)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidCursor(message="invalid cursor: pass next_cursor from the previous page") from exc


@dataclass(frozen=True)
class EventCursor:
    """A position among usage events (integer ids): the last event of a page, by (created_at, id)."""

    created_at: datetime
    id: int

    def encode(self) -> str:
        """An opaque string: base64url of `<microseconds since the epoch>.<id>`."""
        return _unpad(f"{(self.created_at - _EPOCH) // timedelta(microseconds=1)}.{self.id}".encode())

    @classmethod
    def decode(cls, text: str) -> EventCursor:
        """Parse a cursor from encode(); InvalidCursor (400) for anything else."""
        try:
            micros, event_id = (int(part) for part in _pad(text).decode("ascii").split("."))
            return cls(created_at=_EPOCH + timedelta(microseconds=micros), id=event_id)
        except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError):
            raise InvalidCursor(message="invalid cursor", details={"cursor": ["not a cursor from this API"]}) from None
