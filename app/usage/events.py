"""Usage events: one per inference call (live request or batch item), priced from the binding."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from uuid import UUID

from adapters.base import Usage
from app.auth_model import Caller
from app.catalog.model import Pricing

_NANOS_PER_DOLLAR_PER_MTOK = Decimal(1000)  # $/1M tokens → nano-dollars per token


@dataclass
class UsageEvent:
    request_id: str
    source: str  # live | batch
    started_at: datetime
    status: int
    credential_kind: str
    credential_id: UUID | None = None
    relay_key_hash: bytes | None = None
    principal_kind: str | None = None
    principal_id: UUID | None = None
    policy_id: UUID | None = None
    project_id: UUID | None = None
    team_id: UUID | None = None
    duration_ms: float = 0.0
    route: str | None = None
    upstream_status: int | None = None
    error_code: str | None = None
    model_requested: str | None = None
    model_resolved: str | None = None
    host_id: UUID | None = None
    host_name: str | None = None
    binding_id: UUID | None = None
    adapter: str | None = None
    host_key_name: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_nanos: int | None = None
    attempts: int = 0
    streamed: bool = False
    batch_id: UUID | None = None
    batch_idx: int | None = None
    custom_id: str | None = None  # the batch item's custom_id (OpenAI and Anthropic batch APIs)

    def values(self) -> list[object]:
        """The column values, in COLUMNS order. A batch item's request id (`<batch id>:<idx>`) is not stored:
        the view readers read (usage_events_full) makes it from batch_id and batch_idx, 42 bytes a row saved."""
        stored = self.batch_id is None
        return [getattr(self, name) if stored or name != "request_id" else None for name in COLUMNS]

    @classmethod
    def for_caller(cls, caller: Caller, *, request_id: str, source: str, status: int, policy_id: UUID | None,
                   started: float | None = None, **extra: object) -> UsageEvent:
        """An event attributed to CALLER (`Caller.attribution()`: credential, principal, project, team) under
        POLICY_ID (the call's policy)."""
        started = started or time.time()
        return cls(
            request_id=request_id, source=source, status=status,
            started_at=datetime.fromtimestamp(started, tz=UTC),
            duration_ms=round((time.time() - started) * 1000, 3),
            **{**caller.attribution(), "policy_id": policy_id}, **extra,  # type: ignore[arg-type]
        )


COLUMNS = [f.name for f in fields(UsageEvent)]


def cost_nanos(pricing: Pricing | None, usage: Usage) -> int | None:
    """Cost in nano-dollars; None when the binding is unpriced (never a made-up zero).

    Input tokens include cached ones (OpenAI semantics); cached tokens are charged at the cached rate when given.
    """
    if pricing is None:
        return None
    cached = min(usage.cached_tokens, usage.input_tokens)
    cached_rate = pricing.cached_input_per_mtok if pricing.cached_input_per_mtok is not None else pricing.input_per_mtok
    total = (
        Decimal(usage.input_tokens - cached) * pricing.input_per_mtok
        + Decimal(cached) * cached_rate
        + Decimal(usage.output_tokens) * pricing.output_per_mtok
    ) * _NANOS_PER_DOLLAR_PER_MTOK
    return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))
