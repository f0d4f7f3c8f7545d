"""Catalog SQL: read every catalog row, write the rows `apply` and the admin routes change, bump the version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg import Connection, sql

Row = dict[str, Any]

# Tables the generic row writers may touch (identifiers are never taken from input).
_WRITABLE = frozenset({"teams", "projects", "hosts", "host_keys", "models", "bindings", "policies",
                       "policy_rate_limits", "users", "service_accounts", "webhook_endpoints"})
NOTIFY_CHANNEL = "relay_catalog"


@dataclass(frozen=True)
class CatalogRows:
    """Every catalog row at one version, as read in one transaction."""

    version: int
    teams: list[Row]
    projects: list[Row]
    hosts: list[Row]
    host_keys: list[Row]
    models: list[Row]
    bindings: list[Row]
    policies: list[Row]  # live and soft-deleted
    rate_limits: list[Row]
    policy_keys: list[Row]
    users: list[Row]
    service_accounts: list[Row]
    webhooks: list[Row] = field(default_factory=list)  # of projects and teams, by position (secrets encrypted)

    @property
    def empty(self) -> bool:
        """True on a fresh install: nothing was ever applied, or everything was removed."""
        named = (self.teams, self.projects, self.hosts, self.models, self.users, self.service_accounts)
        return not any(named) and all(p["deleted_at"] is not None for p in self.policies)


def read_version(conn: Connection[Any]) -> int:
    """The current catalog version (one cheap row read)."""
    row = conn.execute("SELECT version FROM catalog_version").fetchone()
    return int(_value(row, "version"))


def lock_version(conn: Connection[Any]) -> int:
    """Lock the version row for this transaction: every catalog or credential write takes it first."""
    row = conn.execute("SELECT version FROM catalog_version FOR UPDATE").fetchone()
    return int(_value(row, "version"))


def bump_version(conn: Connection[Any]) -> int:
    """Increment the version and NOTIFY relay_catalog (delivered when the transaction commits)."""
    row = conn.execute("UPDATE catalog_version SET version = version + 1 RETURNING version").fetchone()
    version = int(_value(row, "version"))
    conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, str(version)))
    return version


def begin_consistent_read(conn: Connection[Any]) -> None:
    """Make the transaction just begun read one consistent view (REPEATABLE READ, READ ONLY)."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def load_catalog_rows(conn: Connection[Any]) -> CatalogRows:
    """Read the whole catalog (call inside a REPEATABLE READ transaction for a consistent view)."""
    q = conn.execute
    return CatalogRows(
        version=read_version(conn),
        teams=q("SELECT id, name FROM teams ORDER BY name").fetchall(),
        projects=q("SELECT id, name, team_id FROM projects ORDER BY name").fetchall(),
        hosts=q("SELECT id, name, base_url, enabled FROM hosts ORDER BY name").fetchall(),
        host_keys=q("SELECT id, name, host_id, secret_enc, value_env, enabled FROM host_keys ORDER BY name").fetchall(),
        models=q("SELECT id, name, enabled, max_output_tokens FROM models ORDER BY name").fetchall(),
        bindings=q("SELECT id, model_id, position, host_id, adapter, upstream_model, input_per_mtok, output_per_mtok,"
                   " cached_input_per_mtok, enabled FROM bindings ORDER BY model_id, position").fetchall(),
        policies=q("SELECT id, name, enabled, deleted_at, models, key_selection, breaker_failures, breaker_cooldown_s,"
                   " payload_logging, batch_weight, batch_pace, batch_share FROM policies"
                   " ORDER BY name, created_at").fetchall(),
        rate_limits=q("SELECT id, policy_id, position, requests, tokens, window_s FROM policy_rate_limits"
                      " ORDER BY policy_id, position").fetchall(),
        policy_keys=q("SELECT policy_id, host_key_id, position FROM policy_keys"
                      " ORDER BY policy_id, position").fetchall(),
        users=q("SELECT id, name, policy_id, project_id, team_id FROM users ORDER BY name").fetchall(),
        service_accounts=q("SELECT id, name, policy_id, project_id, team_id FROM service_accounts"
                           " ORDER BY name").fetchall(),
        webhooks=q("SELECT id, project_id, team_id, position, url, events, secret_enc, secret_env, previous_secret_enc,"
                   " previous_secret_env FROM webhook_endpoints ORDER BY position").fetchall(),
    )


def insert_row(conn: Connection[Any], table: str, values: Row) -> UUID:
    """Insert one row into a catalog TABLE; return its id."""
    cols = list(values)
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        _table(table), sql.SQL(", ").join(map(sql.Identifier, cols)), sql.SQL(", ").join(sql.Placeholder() * len(cols)))
    row = conn.execute(query, [values[c] for c in cols]).fetchone()
    return UUID(str(_value(row, "id")))


def update_row(conn: Connection[Any], table: str, row_id: UUID, values: Row) -> None:
    """Set VALUES on the row ROW_ID of a catalog TABLE."""
    cols = list(values)
    assignments = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in cols)
    query = sql.SQL("UPDATE {} SET {} WHERE id = %s").format(_table(table), assignments)
    conn.execute(query, [*(values[c] for c in cols), row_id])


def delete_rows(conn: Connection[Any], table: str, ids: list[UUID]) -> None:
    """Delete rows by id from a catalog TABLE (children go by ON DELETE CASCADE)."""
    if ids:
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(_table(table)), (ids,))


def detach_keys(conn: Connection[Any], column: str, ids: list[UUID]) -> list[UUID]:
    """Clear a removed project (or team) from the relay keys that carry it; return those keys' ids. (Relay keys
    point at the catalog's projects and teams: removing one is the catalog's write.)"""
    if column not in ("project_id", "team_id") or not ids:
        return []
    query = sql.SQL("UPDATE relay_keys SET {col} = NULL, updated_at = now() WHERE {col} = ANY(%s)"
                    " RETURNING id").format(col=sql.Identifier(column))
    return [r["id"] for r in conn.execute(query, (ids,)).fetchall()]


def soft_delete_policies(conn: Connection[Any], ids: list[UUID]) -> None:
    """Mark policies deleted; the rows stay so batches and usage events keep their reference."""
    if ids:
        conn.execute("UPDATE policies SET deleted_at = now() WHERE id = ANY(%s) AND deleted_at IS NULL", (ids,))


def reattach_keys(conn: Connection[Any], policy_name: str, policy_id: UUID) -> list[UUID]:
    """Point the relay keys left on a deleted policy named POLICY_NAME at POLICY_ID, the live policy of that
    name; return those keys' ids. (A key names its policy by id, so without this a re-applied policy of the
    same name would leave its keys answering policy_deleted.)"""
    query = ("UPDATE relay_keys k SET policy_id = %s, updated_at = now() FROM policies p"
             " WHERE p.id = k.policy_id AND p.name = %s AND p.deleted_at IS NOT NULL RETURNING k.id")
    return [r["id"] for r in conn.execute(query, (policy_id, policy_name)).fetchall()]


def replace_policy_keys(conn: Connection[Any], policy_id: UUID, host_key_ids: list[UUID]) -> None:
    """Set a policy's host-key pool to HOST_KEY_IDS, in that order."""
    conn.execute("DELETE FROM policy_keys WHERE policy_id = %s", (policy_id,))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO policy_keys (policy_id, host_key_id, position) VALUES (%s, %s, %s)",
                        [(policy_id, key_id, i) for i, key_id in enumerate(host_key_ids)])


def find_live_policy(conn: Connection[Any], name: str, *, lock: bool = False) -> Row | None:
    """The live (not deleted) policy named NAME."""
    if "\x00" in name:  # no name holds NUL, and Postgres text cannot carry it
        return None
    query = "SELECT id, name, enabled FROM policies WHERE name = %s AND deleted_at IS NULL"
    return conn.execute(query + (" FOR UPDATE" if lock else ""), (name,)).fetchone()


def set_policy_enabled(conn: Connection[Any], policy_id: UUID, enabled: bool) -> bool:
    """Enable or disable a policy; True when that changed it."""
    cur = conn.execute("UPDATE policies SET enabled = %s WHERE id = %s AND enabled <> %s",
                       (enabled, policy_id, enabled))
    return cur.rowcount > 0


def find_named(conn: Connection[Any], table: str, name: str) -> Row | None:
    """The row named NAME in teams, projects, users or service_accounts."""
    if table not in ("teams", "projects", "users", "service_accounts"):
        raise ValueError(f"not a named table: {table}")
    if "\x00" in name:  # no name holds NUL, and Postgres text cannot carry it
        return None
    columns = "id, name" if table == "teams" else (
        "id, name, team_id" if table == "projects" else "id, name, policy_id, project_id, team_id")
    query = sql.SQL("SELECT " + columns + " FROM {} WHERE name = %s").format(sql.Identifier(table))
    return conn.execute(query, (name,)).fetchone()


def _table(table: str) -> sql.Identifier:
    if table not in _WRITABLE:
        raise ValueError(f"not a catalog table: {table}")
    return sql.Identifier(table)


def _value(row: Any, column: str) -> Any:
    """A column of a row from a dict-row or tuple-row connection."""
    if row is None:
        raise LookupError("catalog_version row is missing (run `relay migrate`)")
    return row[column] if isinstance(row, dict) else row[0]
