"""The resolved caller: one object used everywhere downstream of authentication."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
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

    def attribution(self) -> dict[str, object]:
        """The eight attribution columns a batch row (and so each of its items' usage events) records."""
        return {name: getattr(self, name) for name in ATTRIBUTION}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Caller:
        """The caller rebuilt from a row holding the attribution columns (a batch, as submitted)."""
        key_hash = row["relay_key_hash"]
        return cls(**{name: row[name] for name in ATTRIBUTION if name != "relay_key_hash"},
                   relay_key_hash=bytes(key_hash) if key_hash is not None else None)


# Who submitted a batch, as recorded on it: every column the page lists (RelayKeyHash, PolicyID, ProjectID, TeamID,
# PrincipalKind, PrincipalID, CredentialKind, CredentialID).
ATTRIBUTION = ("relay_key_hash", "policy_id", "project_id", "team_id", "principal_kind", "principal_id",
               "credential_kind", "credential_id")
