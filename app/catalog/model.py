"""Immutable catalog objects as the pipeline sees them (built by the cache from Postgres)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from uuid import UUID


@dataclass(frozen=True)
class Host:
    id: UUID
    name: str
    base_url: str
    enabled: bool


@dataclass(frozen=True)
class HostKey:
    id: UUID
    name: str
    host_id: UUID
    enabled: bool
    # Returns the secret value; decrypts or reads the env var on demand. Never logged, never returned.
    secret: Callable[[], str] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Pricing:
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None = None


@dataclass(frozen=True)
class Binding:
    id: UUID
    model_name: str
    position: int
    host: Host
    adapter: str  # openai | anthropic | openai_responses
    upstream_model: str
    pricing: Pricing | None
    enabled: bool


@dataclass(frozen=True)
class Model:
    id: UUID
    name: str
    enabled: bool
    bindings: tuple[Binding, ...]
    max_output_tokens: int | None = None  # what a call answers at most when its request sets no limit


@dataclass(frozen=True)
class RateLimit:
    id: UUID
    requests: int | None
    tokens: int | None
    window_s: int


@dataclass(frozen=True)
class Policy:
    id: UUID
    name: str
    enabled: bool
    deleted: bool
    models: tuple[str, ...]  # grants: exact names or * wildcards
    rate_limits: tuple[RateLimit, ...]
    key_pool: tuple[HostKey, ...]  # in the policy's order
    key_selection: str  # prioritized | round_robin | least_recently_used
    breaker_failures: int
    breaker_cooldown_s: float
    payload_logging: bool
    batch_pace: bool = False  # batch items wait for the limits' budget instead of being discarded rate_limited
    batch_share: float = 1.0  # fraction of each rate limit that batch items may use; the rest is live traffic's

    def grants(self, model_name: str) -> bool:
        """True when any grant matches the model name exactly or as a * wildcard."""
        return any(g == model_name or fnmatch.fnmatchcase(model_name, g) for g in self.models)

    def pacing_starved(self) -> str | None:
        """Why a paced policy's batches could never start (its share of a limit is less than one), else None."""
        if not self.batch_pace:
            return None
        return next((why for limit in self.rate_limits
                     if (why := share_rounds_to_zero(limit.requests, limit.tokens, self.batch_share))), None)


def share_rounds_to_zero(requests: int | None, tokens: int | None, share: float) -> str | None:
    """What SHARE leaves of a limit of REQUESTS and TOKENS a window when that is less than one request or token:
    pacing floors it, so the limit lets no batch item start; None when it lets some through."""
    for amount, unit in ((requests, "request"), (tokens, "token")):
        if amount is not None and math.floor(amount * share) < 1:
            return f"a share of {share:g} of {amount} {unit}s a window is less than one {unit}"
    return None


@dataclass(frozen=True)
class Principal:
    kind: str  # user | service_account
    id: UUID
    name: str
    policy_id: UUID | None
    project_id: UUID | None
    team_id: UUID | None
