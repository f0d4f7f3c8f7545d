"""A batch's and a file's id as each API spells it: Relay's UUID, OpenAI's `batch_<hex>` and `file-<hex>`,
Anthropic's `msgbatch_<hex>`; and a query argument that takes any spelling of a batch id."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from marshmallow import ValidationError, fields

BATCH_PREFIXES = ("batch_", "msgbatch_")
FILE_PREFIX = "file-"


def openai_batch_id(batch_id: UUID) -> str:
    return f"batch_{batch_id.hex}"


def anthropic_batch_id(batch_id: UUID) -> str:
    return f"msgbatch_{batch_id.hex}"


def file_id(value: UUID) -> str:
    return f"{FILE_PREFIX}{value.hex}"


def parse_batch_id(text: str) -> UUID | None:
    """The batch behind `batch_<hex>`, `msgbatch_<hex>` or a plain UUID; None for anything else."""
    for prefix in BATCH_PREFIXES:
        if text.startswith(prefix):
            return _hex_uuid(text[len(prefix):])
    try:
        return UUID(text)
    except ValueError:
        return None


def parse_file_id(text: str) -> UUID | None:
    return _hex_uuid(text[len(FILE_PREFIX):]) if text.startswith(FILE_PREFIX) else None


def _hex_uuid(text: str) -> UUID | None:
    if len(text) != 32 or not text.isascii() or not text.isalnum():
        return None
    try:
        return UUID(hex=text)
    except ValueError:
        return None


class BatchIdField(fields.String):
    """A batch id in any API's spelling (a UUID, `batch_<hex>`, `msgbatch_<hex>`), loaded as the UUID."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {}).setdefault(
            "description", "a batch id: the UUID, or OpenAI's `batch_<hex>` or Anthropic's `msgbatch_<hex>`")
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> UUID:  # type: ignore[override]
        parsed = parse_batch_id(super()._deserialize(value, attr, data, **kwargs))
        if parsed is None:
            raise ValidationError("Not a batch id (a UUID, batch_<hex> or msgbatch_<hex>).")
        return parsed
