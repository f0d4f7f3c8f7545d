"""What a batch created through a provider API (OpenAI, Anthropic) or as a re-run adds to Relay's own submit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import Connection


@dataclass(frozen=True)
class Rerun:
    """A re-run's lineage: the batch it was made from, the first batch of the chain, each new item's idx in that
    first batch (in the new batch's idx order), and the re-run's spend cap (nano-dollars; None: no cap)."""

    rerun_of: UUID
    original_id: UUID
    source_idxs: Sequence[int]
    max_cost_nanos: int | None = None
    max_cost_mode: str = "hard"

    @property
    def columns(self) -> dict[str, Any]:
        return {"rerun_of": self.rerun_of, "original_id": self.original_id}


@dataclass(frozen=True)
class BatchOrigin:
    """The creating API's batch columns (`api`, `endpoint`, ...), each item's custom_id (provider APIs), writes to
    make in the batch's own transaction (e.g. its output file records), and the lineage of a re-run."""

    columns: dict[str, Any]
    custom_ids: Sequence[str] | None = None
    also: Callable[[Connection[Any], UUID], None] | None = None
    rerun: Rerun | None = None
