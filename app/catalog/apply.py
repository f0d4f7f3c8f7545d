"""Apply a whole catalog declaratively: create and update what the file says, remove what it leaves out."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg import Connection

from app.catalog import store, webhooks
from app.catalog.secrets import SecretBox
from app.catalog.store import CatalogRows, Row
from app.catalog.validate import InvalidCatalog, validate_catalog
from app.catalog.writes import catalog_write
from app.runtime import Runtime

KINDS = ("teams", "projects", "hosts", "host_keys", "models", "policies", "users", "service_accounts", "relay_keys")


@dataclass
class ApplyResult:
    """What an apply changed: names created, updated and deleted, per kind."""

    version: int
    dry_run: bool
    kept: bool = False  # applied with only_if_empty over a catalog that was not empty: nothing was changed
    changes: dict[str, dict[str, list[str]]] = field(
        default_factory=lambda: {kind: {"created": [], "updated": [], "deleted": []} for kind in KINDS})

    @property
    def changed(self) -> bool:
        """True when anything was (or, in a dry run, would be) created, updated or deleted."""
        return any(names for kind in self.changes.values() for names in kind.values())

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer of `PUT /admin/catalog`."""
        return {"changed": self.changed, "dry_run": self.dry_run, "version": self.version, "changes": self.changes}


def apply_catalog(runtime: Runtime, raw: Any, *, dry_run: bool = False, only_if_empty: bool = False,
                  env: Mapping[str, str] | None = None) -> ApplyResult:
    """Validate RAW (a parsed YAML/JSON document) fully, then apply it in one transaction (with ONLY_IF_EMPTY,
    only over an empty catalog: a set-up script's default catalog never replaces one somebody wrote)."""
    env = os.environ if env is None else env
    doc = validate_catalog(raw, env)
    if problems := webhooks.resolve_secrets(doc, env):
        raise InvalidCatalog(problems)
    box = SecretBox(runtime.settings.secret_key)
    with catalog_write(runtime) as write:
        current = store.load_catalog_rows(write.conn)
        if only_if_empty and not current.empty:
            return ApplyResult(version=current.version, dry_run=dry_run, kept=True)
        problems = _check_against_database(doc, current) + webhooks.missing_secrets(doc, current)
        if problems:
            raise InvalidCatalog(problems)
        result = ApplyResult(version=current.version, dry_run=dry_run)
        _Reconciler(write.conn, box, current, result).run(doc)
        write.changed = result.changed
        write.discard = dry_run
    if result.changed and not dry_run:
        result.version = write.version
    return result


def _check_against_database(doc: dict[str, Any], current: CatalogRows) -> list[str]:
    """Problems only the database can show: a new host key without a secret."""
    problems = []
    existing_keys = {r["name"] for r in current.host_keys}
    for i, host in enumerate(doc["hosts"]):
        for k, key in enumerate(host["keys"]):
            if "_secret" not in key and key["name"] not in existing_keys:
                problems.append(f"hosts[{i}].keys[{k}]: give value or value_env (a new key has no stored secret)")
    return problems


class _Reconciler:
    """Turns the current rows into the document's, recording each change in the result."""

    def __init__(self, conn: Connection[Any], box: SecretBox, current: CatalogRows, result: ApplyResult) -> None:
        self.conn = conn
        self.box = box
        self.cur = current
        self.result = result
        self.ids: dict[str, dict[str, UUID]] = {}
        self.live_policies = [p for p in current.policies if p["deleted_at"] is None]

    def run(self, doc: dict[str, Any]) -> None:
        """Upsert in dependency order, then remove in reverse order."""
        self._upsert("teams", "teams", {t["name"]: {} for t in doc["teams"]}, self.cur.teams)
        self._upsert("projects", "projects", {p["name"]: {"team_id": self._ref("teams", p.get("team"))}
                                              for p in doc["projects"]}, self.cur.projects)
        self._webhooks(doc)
        self._upsert("hosts", "hosts", {h["name"]: {"base_url": h["base_url"], "enabled": h["enabled"]}
                                        for h in doc["hosts"]}, self.cur.hosts)
        self._host_keys(doc["hosts"])
        self._models(doc["models"])
        self._policies(doc["policies"])
        project_teams = {p["name"]: p.get("team") for p in doc["projects"]}
        for kind in ("users", "service_accounts"):
            desired = {w["name"]: {"policy_id": self._ref("policies", w["policy"]),
                                   "project_id": self._ref("projects", w.get("project")),
                                   "team_id": self._ref("teams", w.get("team") or project_teams.get(w.get("project")))}
                       for w in doc[kind]}
            self._upsert(kind, kind, desired, getattr(self.cur, kind))
        self._remove_all()

    def _upsert(self, kind: str, table: str, desired: dict[str, Row], rows: list[Row]) -> dict[str, UUID]:
        """Create or update rows by name; return name -> id."""
        current = {r["name"]: r for r in rows}
        ids = self.ids.setdefault(kind, {})
        for name, values in desired.items():
            row = current.get(name)
            if row is None:
                ids[name] = store.insert_row(self.conn, table, {"name": name, **values})
                self._note(kind, "created", name)
                continue
            ids[name] = row["id"]
            diff = {k: v for k, v in values.items() if row.get(k) != v}
            if diff:
                store.update_row(self.conn, table, row["id"], diff)
                self._note(kind, "updated", name)
        return ids

    def _host_keys(self, hosts: list[dict[str, Any]]) -> None:
        current = {r["name"]: r for r in self.cur.host_keys}
        desired: dict[str, Row] = {}
        for host in hosts:
            for key in host["keys"]:
                values: Row = {"host_id": self.ids["hosts"][host["name"]], "enabled": key["enabled"]}
                secret = key.get("_secret")
                if secret is not None:
                    values["value_env"] = key.get("value_env")
                    row = current.get(key["name"])
                    if row is None or not self.box.matches(row["secret_enc"], secret):
                        values["secret_enc"] = self.box.encrypt(secret)
                desired[key["name"]] = values
        self._upsert("host_keys", "host_keys", desired, self.cur.host_keys)

    def _models(self, models: list[dict[str, Any]]) -> None:
        desired = {m["name"]: {"enabled": m["enabled"], "max_output_tokens": m["max_output_tokens"]} for m in models}
        ids = self._upsert("models", "models", desired, self.cur.models)
        for m in models:
            rows = [{"host_id": self.ids["hosts"][b["host"]], "adapter": b["adapter"],
                     "upstream_model": b["upstream_model"], **_pricing_columns(b.get("pricing")),
                     "enabled": b["enabled"]} for b in m["bindings"]]
            if self._positional("bindings", "model_id", ids[m["name"]], rows, self.cur.bindings):
                self._note("models", "updated", m["name"])

    def _policies(self, policies: list[dict[str, Any]]) -> None:
        desired = {p["name"]: {"enabled": p["enabled"], "models": list(p["models"]),
                               "key_selection": p["key_selection"],
                               "breaker_failures": p["circuit_breaker"]["failures"],
                               "breaker_cooldown_s": float(p["circuit_breaker"]["cooldown"]),
                               "payload_logging": p["payload_logging"],
                               "batch_weight": float(p["batch_weight"]),
                               "batch_pace": bool(p["batch"]["pace"]),
                               "batch_share": float(p["batch"]["share"])} for p in policies}
        ids = self._upsert("policies", "policies", desired, self.live_policies)
        for name in self.result.changes["policies"]["created"]:  # a deleted policy's keys find it again
            for key_id in store.reattach_keys(self.conn, name, ids[name]):
                self._note("relay_keys", "updated", str(key_id))
        for p in policies:
            policy_id = ids[p["name"]]
            limits = [{"requests": r.get("requests"), "tokens": r.get("tokens"), "window_s": int(r["per"])}
                      for r in p["rate_limits"]]
            changed = self._positional("policy_rate_limits", "policy_id", policy_id, limits, self.cur.rate_limits)
            pool = [self.ids["host_keys"][name] for name in p["key_pool"]]
            current_pool = [r["host_key_id"] for r in self.cur.policy_keys if r["policy_id"] == policy_id]
            if pool != current_pool:
                store.replace_policy_keys(self.conn, policy_id, pool)
                changed = True
            if changed:
                self._note("policies", "updated", p["name"])

    def _webhooks(self, doc: dict[str, Any]) -> None:
        """Each project's and team's webhooks, by position."""
        for kind, column in webhooks.OWNERS:
            for owner in doc[kind]:
                owner_id = self.ids[kind][owner["name"]]
                stored = {r["position"]: r for r in self.cur.webhooks if r[column] == owner_id}
                rows = webhooks.desired_rows(self.box, owner["webhooks"], stored)
                if self._positional("webhook_endpoints", column, owner_id, rows, self.cur.webhooks):
                    self._note(kind, "updated", owner["name"])

    def _positional(self, table: str, parent_column: str, parent_id: UUID, rows: list[Row],
                    all_rows: list[Row]) -> bool:
        """Make a parent's ordered children equal ROWS, updating in place by position; True if anything changed."""
        by_position = {r["position"]: r for r in all_rows if r[parent_column] == parent_id}
        changed = False
        for position, values in enumerate(rows):
            row = by_position.pop(position, None)
            if row is None:
                store.insert_row(self.conn, table, {parent_column: parent_id, "position": position, **values})
                changed = True
                continue
            diff = {k: v for k, v in values.items() if row.get(k) != v}
            if diff:
                store.update_row(self.conn, table, row["id"], diff)
                changed = True
        if by_position:
            store.delete_rows(self.conn, table, [r["id"] for r in by_position.values()])
            changed = True
        return changed

    def _remove_all(self) -> None:
        """Remove what the document leaves out, dependents first; policies are only soft-deleted.

        Relay keys are not part of the catalog: those of a removed project or team keep working without it
        (listed under relay_keys.updated); those of a removed user or service account stop working.
        """
        for kind in ("service_accounts", "users", "policies", "models", "host_keys", "hosts", "projects", "teams"):
            rows = self.live_policies if kind == "policies" else getattr(self.cur, kind)
            gone = [r for r in rows if r["name"] not in self.ids.get(kind, {})]
            if not gone:
                continue
            ids = [r["id"] for r in gone]
            if kind == "policies":
                store.soft_delete_policies(self.conn, ids)
            else:
                if kind in ("projects", "teams"):
                    for key_id in store.detach_keys(self.conn, kind[:-1] + "_id", ids):
                        self._note("relay_keys", "updated", str(key_id))
                store.delete_rows(self.conn, kind, ids)
            for r in gone:
                self._note(kind, "deleted", r["name"])

    def _ref(self, kind: str, name: str | None) -> UUID | None:
        return None if name is None else self.ids[kind][name]

    def _note(self, kind: str, change: str, name: str) -> None:
        changes = self.result.changes[kind]
        if name not in changes[change] and not (change == "updated" and name in changes["created"]):
            changes[change].append(name)


def _pricing_columns(pricing: dict[str, Any] | None) -> Row:
    pricing = pricing or {}
    return {"input_per_mtok": pricing.get("input_per_mtok"), "output_per_mtok": pricing.get("output_per_mtok"),
            "cached_input_per_mtok": pricing.get("cached_input_per_mtok")}
