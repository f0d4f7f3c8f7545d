"""An immutable snapshot of the catalog and credentials at one version: what the hot path reads."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any
from uuid import UUID

from app.catalog.model import Binding, Host, HostKey, Model, Policy, Pricing, Principal, RateLimit
from app.catalog.secrets import SecretBox, SecretUnreadable
from app.catalog.store import CatalogRows, Row
from app.credentials.model import KeyValueRecord, RelayKeyRecord, TokenRecord


@dataclass(frozen=True)
class CredentialRows:
    """Every relay key, key value and recent token at one version."""

    relay_keys: list[RelayKeyRecord]
    key_values: list[KeyValueRecord]
    tokens: list[TokenRecord]


@dataclass(frozen=True)
class CatalogSnapshot:
    """The catalog and credentials at VERSION; the mappings are read-only views."""

    version: int
    hosts: Mapping[UUID, Host]
    host_keys: Mapping[UUID, HostKey]
    models: Mapping[str, Model]  # by the name callers use; bindings ordered by position
    policies: Mapping[UUID, Policy]  # including disabled and deleted ones (flagged)
    principals: Mapping[tuple[str, UUID], Principal]  # by (kind, id)
    teams: Mapping[UUID, str]  # id -> name
    projects: Mapping[UUID, str]  # id -> name
    relay_keys: Mapping[UUID, RelayKeyRecord]
    key_values: Mapping[bytes, KeyValueRecord]  # by sha256 of the secret
    tokens: Mapping[UUID, TokenRecord]  # not expired, or expired recently

    def model(self, name: str) -> Model | None:
        """The model callers name NAME."""
        return self.models.get(name)

    def policy(self, policy_id: UUID) -> Policy | None:
        """The policy with POLICY_ID, deleted or not."""
        return self.policies.get(policy_id)

    def principal(self, kind: str, principal_id: UUID) -> Principal | None:
        """The user or service account with PRINCIPAL_ID."""
        return self.principals.get((kind, principal_id))

    def host_by_name(self, name: str) -> Host | None:
        """The host named NAME."""
        return next((h for h in self.hosts.values() if h.name == name), None)


def build_snapshot(rows: CatalogRows, creds: CredentialRows, box: SecretBox) -> CatalogSnapshot:
    """Assemble the immutable objects from rows read in one transaction."""
    hosts = {r["id"]: Host(id=r["id"], name=r["name"], base_url=r["base_url"], enabled=r["enabled"])
             for r in rows.hosts}
    host_keys = {r["id"]: HostKey(id=r["id"], name=r["name"], host_id=r["host_id"], enabled=r["enabled"],
                                  secret=_secret_reader(box, r["secret_enc"], r["value_env"]))
                 for r in rows.host_keys}
    return CatalogSnapshot(
        version=rows.version,
        hosts=_frozen(hosts),
        host_keys=_frozen(host_keys),
        models=_frozen(_models(rows, hosts)),
        policies=_frozen(_policies(rows, host_keys)),
        principals=_frozen(_principals(rows)),
        teams=_frozen({r["id"]: r["name"] for r in rows.teams}),
        projects=_frozen({r["id"]: r["name"] for r in rows.projects}),
        relay_keys=_frozen({k.id: k for k in creds.relay_keys}),
        key_values=_frozen({v.key_hash: v for v in creds.key_values}),
        tokens=_frozen({t.id: t for t in creds.tokens}),
    )


def _models(rows: CatalogRows, hosts: dict[UUID, Host]) -> dict[str, Model]:
    by_model: dict[UUID, list[Row]] = {}
    for b in rows.bindings:
        by_model.setdefault(b["model_id"], []).append(b)
    models = {}
    for m in rows.models:
        bindings = tuple(
            Binding(id=b["id"], model_name=m["name"], position=b["position"], host=hosts[b["host_id"]],
                    adapter=b["adapter"], upstream_model=b["upstream_model"], pricing=_pricing(b), enabled=b["enabled"])
            for b in sorted(by_model.get(m["id"], []), key=lambda b: b["position"]))
        models[m["name"]] = Model(id=m["id"], name=m["name"], enabled=m["enabled"], bindings=bindings,
                                  max_output_tokens=m["max_output_tokens"])
    return models


def _pricing(b: Row) -> Pricing | None:
    if b["input_per_mtok"] is None or b["output_per_mtok"] is None:
        return None
    cached = b["cached_input_per_mtok"]
    return Pricing(input_per_mtok=Decimal(b["input_per_mtok"]), output_per_mtok=Decimal(b["output_per_mtok"]),
                   cached_input_per_mtok=None if cached is None else Decimal(cached))


def _policies(rows: CatalogRows, host_keys: dict[UUID, HostKey]) -> dict[UUID, Policy]:
    limits: dict[UUID, list[RateLimit]] = {}
    for r in rows.rate_limits:  # ordered by policy, position
        limits.setdefault(r["policy_id"], []).append(
            RateLimit(id=r["id"], requests=r["requests"], tokens=r["tokens"], window_s=r["window_s"]))
    pools: dict[UUID, list[HostKey]] = {}
    for r in rows.policy_keys:  # ordered by policy, position
        pools.setdefault(r["policy_id"], []).append(host_keys[r["host_key_id"]])
    return {p["id"]: Policy(id=p["id"], name=p["name"], enabled=p["enabled"], deleted=p["deleted_at"] is not None,
                            models=tuple(p["models"]), rate_limits=tuple(limits.get(p["id"], [])),
                            key_pool=tuple(pools.get(p["id"], [])), key_selection=p["key_selection"],
                            breaker_failures=p["breaker_failures"], breaker_cooldown_s=p["breaker_cooldown_s"],
                            payload_logging=p["payload_logging"], batch_pace=p["batch_pace"],
                            batch_share=p["batch_share"])
            for p in rows.policies}


def _principals(rows: CatalogRows) -> dict[tuple[str, UUID], Principal]:
    found = {}
    for kind, table in (("user", rows.users), ("service_account", rows.service_accounts)):
        for r in table:
            found[(kind, r["id"])] = Principal(kind=kind, id=r["id"], name=r["name"], policy_id=r["policy_id"],
                                               project_id=r["project_id"], team_id=r["team_id"])
    return found


def _secret_reader(box: SecretBox, encrypted: bytes | None, value_env: str | None) -> Callable[[], str]:
    """A callable returning the host key's secret, decrypted on first use and kept for later calls."""
    lock = threading.Lock()
    plain: list[str] = []

    def secret() -> str:
        with lock:
            if not plain:
                if encrypted is not None:
                    plain.append(box.decrypt(encrypted))
                elif value_env and os.environ.get(value_env):
                    plain.append(os.environ[value_env])
                else:
                    raise SecretUnreadable(message="a host key has no stored secret")
            return plain[0]

    return secret


def _frozen(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping)
