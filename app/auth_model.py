"""The resolved caller: one object used everywhere downstream of authentication."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True)
class Caller:
    credential_kind: str  # relay_key | inference_token
    credential_id: UUID  # relay key id or token id
    relay_key_hash: bytes | None  # sha256 of the key value used (relay keys only)
    principal_kind: str  # user | service_account
    principal_id: UUID
    policy_id: UUID
    project_id: UUID | None
    team_id: UUID | None

    @property
    def owner(self) -> str:
        """Who owns what this caller submits: the key *value*, or for tokens the user."""
        if self.credential_kind == "relay_key":
            assert self.relay_key_hash is not None
            return "key:" + self.relay_key_hash.hex()
        return f"user:{self.principal_id}"
