"""Standard Webhooks signatures: `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>` (one per
valid secret, space-separated, so a receiver holding either secret of a rotation verifies)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from schemas.webhooks import secret_bytes

__all__ = ["headers", "secret_bytes", "signature"]


def signature(keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` for each key."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
                    for key in keys)


def headers(keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt (the id is the same on every attempt, the timestamp is
    the attempt's own: receivers refuse one older than five minutes)."""
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(keys, msg_id, timestamp, body)}
