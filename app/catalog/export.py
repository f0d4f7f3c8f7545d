"""The catalog as a document in the file format, without any secret value (`GET /admin/catalog`)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from app.catalog import store
from app.catalog.store import CatalogRows, Row
from app.runtime import Runtime
from schemas.catalog import CatalogSchema


def export_catalog(runtime: Runtime) -> dict[str, Any]:
    """The catalog serialised in the file format (durations as `60s`, prices as numbers), ready for YAML/JSON."""
    return CatalogSchema().dump(read_catalog(runtime))


def read_catalog(runtime: Runtime, *, with_ids: bool = False) -> dict[str, Any]:
    """Read the catalog in one consistent transaction; the document before serialisation."""
    with runtime.pool.connection() as conn, conn.transaction():
        store.begin_consistent_read(conn)
        rows = store.load_catalog_rows(conn)
    return render_catalog(rows, with_ids=with_ids)


def render_catalog(rows: CatalogRows, *, with_ids: bool = False) -> dict[str, Any]:
    """ROWS as a catalog document (ids added for the admin listings); host keys never carry a value."""
    names = {r["id"]: r["name"] for table in (rows.teams, rows.projects, rows.hosts, rows.host_keys, rows.policies)
             for r in table}
    doc = {
        "hosts": [_host(h, rows, with_ids) for h in rows.hosts],
        "models": [_model(m, rows, names, with_ids) for m in rows.models],
        "policies": [_policy(p, rows, names, with_ids) for p in rows.policies if p["deleted_at"] is None],
        "teams": [_ided(t, {"name": t["name"], **_webhooks(rows, "team_id", t["id"], with_ids)}, with_ids)
                  for t in rows.teams],
        "projects": [_ided(p, _compact({"name": p["name"], "team": names.get(p["team_id"]),
                                        **_webhooks(rows, "project_id", p["id"], with_ids)}), with_ids)
                     for p in rows.projects],
        "users": [_ided(u, _principal(u, names), with_ids) for u in rows.users],
        "service_accounts": [_ided(s, _principal(s, names), with_ids) for s in rows.service_accounts],
    }
    return doc


def _host(host: Row, rows: CatalogRows, with_ids: bool) -> dict[str, Any]:
    keys = [_ided(k, _compact({"name": k["name"], "value_env": k["value_env"], "enabled": k["enabled"]}), with_ids)
            for k in rows.host_keys if k["host_id"] == host["id"]]
    return _ided(host, {"name": host["name"], "base_url": host["base_url"], "enabled": host["enabled"],
                        "keys": keys}, with_ids)


def _model(model: Row, rows: CatalogRows, names: dict[UUID, str], with_ids: bool) -> dict[str, Any]:
    bindings = []
    for b in rows.bindings:
        if b["model_id"] != model["id"]:
            continue
        binding = {"host": names[b["host_id"]], "adapter": b["adapter"], "upstream_model": b["upstream_model"]}
        if b["input_per_mtok"] is not None and b["output_per_mtok"] is not None:
            binding["pricing"] = _compact({"input_per_mtok": b["input_per_mtok"],
                                           "output_per_mtok": b["output_per_mtok"],
                                           "cached_input_per_mtok": b["cached_input_per_mtok"]})
        binding["enabled"] = b["enabled"]
        bindings.append(_ided(b, binding, with_ids))
    limit = {"max_output_tokens": model["max_output_tokens"]} if model["max_output_tokens"] is not None else {}
    return _ided(model, {"name": model["name"], "enabled": model["enabled"], **limit, "bindings": bindings}, with_ids)


def _policy(policy: Row, rows: CatalogRows, names: dict[UUID, str], with_ids: bool) -> dict[str, Any]:
    limits = [_compact({"requests": r["requests"], "tokens": r["tokens"], "per": r["window_s"]})
              for r in rows.rate_limits if r["policy_id"] == policy["id"]]
    pool = [names[r["host_key_id"]] for r in rows.policy_keys if r["policy_id"] == policy["id"]]
    return _ided(policy, {
        "name": policy["name"], "enabled": policy["enabled"], "models": list(policy["models"]),
        "rate_limits": limits, "key_pool": pool, "key_selection": policy["key_selection"],
        "circuit_breaker": {"failures": policy["breaker_failures"], "cooldown": policy["breaker_cooldown_s"]},
        "payload_logging": policy["payload_logging"], "batch_weight": policy["batch_weight"],
        "batch": {"pace": policy["batch_pace"], "share": policy["batch_share"]}}, with_ids)


def _webhooks(rows: CatalogRows, column: str, owner_id: UUID, with_ids: bool) -> dict[str, Any]:
    """{"webhooks": [...]} of a project or team (url, events, the secrets' variables, never a value); {} if none."""
    hooks = [_ided(w, _compact({"url": w["url"], "secret_env": w["secret_env"],
                                "previous_secret_env": w["previous_secret_env"], "events": list(w["events"])}),
                   with_ids) for w in rows.webhooks if w[column] == owner_id]
    return {"webhooks": hooks} if hooks else {}


def _principal(row: Row, names: dict[UUID, str]) -> dict[str, Any]:
    return _compact({"name": row["name"], "policy": names.get(row["policy_id"]),
                     "project": names.get(row["project_id"]), "team": names.get(row["team_id"])})


def _ided(row: Row, item: dict[str, Any], with_ids: bool) -> dict[str, Any]:
    return {"id": row["id"], **item} if with_ids else item


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
