"""What a batch created through a provider API (OpenAI, Anthropic) adds to Relay's own submit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import Connection


@dataclass(frozen=True)
class BatchOrigin:
    """The creating API's batch columns (`api`, `endpoint`, ...), each item's custom_id, and writes to make in the
    batch's own transaction (e.g. its output file records)."""

    columns: dict[str, Any]
    custom_ids: Sequence[str]
    also: Callable[[Connection[Any], UUID], None] | None = None
