"""Credential records as the cache and the admin services see them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID


@dataclass(frozen=True)
class RelayKeyRecord:
    id: UUID
    name: str | None
    prefix: str  # the current value's first characters, shown in listings
    principal_kind: str  # user | service_account
    principal_id: UUID
    policy_id: UUID
    project_id: UUID | None
    team_id: UUID | None
    state: str  # active | disabled | revoked (expiry is computed from expires_at)
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime

    def effective_state(self, now: datetime) -> str:
        """active, disabled, revoked or expired, as of NOW."""
        if self.state != "active":
            return self.state
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class KeyValueRecord:
    key_hash: bytes  # sha256 of the secret
    relay_key_id: UUID
    prefix: str
    created_at: datetime
    retired_at: datetime | None  # set when a rotation replaced this value
    valid_until: datetime | None  # a retired value keeps working until then

    def rotated_out(self, now: datetime) -> bool:
        """True when a rotation retired this value and its grace period is over."""
        return self.retired_at is not None and (self.valid_until is None or self.valid_until <= now)


@dataclass(frozen=True)
class TokenRecord:
    id: UUID
    user_id: UUID
    expires_at: datetime
    revoked_at: datetime | None
    created_at: datetime

    def effective_state(self, now: datetime) -> str:
        """active, revoked or expired, as of NOW."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= now else "active"


@dataclass(frozen=True)
class RelayKeyView:
    """A relay key with the names of what it points at, for listings (never its secret)."""

    key: RelayKeyRecord
    principal: str | None  # None when the principal was removed from the catalog
    policy: str
    project: str | None
    team: str | None
    policy_state: str = "active"  # active | disabled | deleted

    def state(self, now: datetime) -> str:
        """The key's own state; an active key whose policy is deleted or disabled is `policy_deleted` or
        `policy_disabled`, which is what its calls answer."""
        state = self.key.effective_state(now)
        return f"policy_{self.policy_state}" if state == "active" and self.policy_state != "active" else state


@dataclass(frozen=True)
class TokenView:
    """An inference token with its user's name, for listings (never the token itself)."""

    token: TokenRecord
    user: str
