"""Admin operations on single catalog objects: list each kind, enable / disable / delete a policy."""

from __future__ import annotations

from typing import Any

from app.catalog import store
from app.catalog.export import read_catalog
from app.catalog.writes import catalog_write
from app.errors import NotFound
from app.runtime import Runtime

LISTABLE = ("hosts", "models", "policies", "teams", "projects", "users", "service_accounts")


class PolicyNotFound(NotFound):
    code = "policy_not_found"


def list_kind(runtime: Runtime, kind: str) -> list[dict[str, Any]]:
    """Every object of KIND (one of LISTABLE) in the catalog format, with ids and without secrets."""
    if kind not in LISTABLE:
        raise ValueError(f"not a catalog kind: {kind}")
    items: list[dict[str, Any]] = read_catalog(runtime, with_ids=True)[kind]
    return items


def get_policy_document(runtime: Runtime, name: str) -> dict[str, Any]:
    """The live policy named NAME in the catalog format; PolicyNotFound."""
    for policy in list_kind(runtime, "policies"):
        if policy["name"] == name:
            return policy
    raise PolicyNotFound(message=f"no policy named {name[:200]!r}")


def set_policy_enabled(runtime: Runtime, name: str, enabled: bool) -> dict[str, Any]:
    """Enable or disable the live policy NAME (a later `apply` sets it back to what the file says)."""
    with catalog_write(runtime) as write:
        row = store.find_live_policy(write.conn, name, lock=True)
        if row is None:
            raise PolicyNotFound(message=f"no policy named {name[:200]!r}")
        write.changed = store.set_policy_enabled(write.conn, row["id"], enabled)
    return get_policy_document(runtime, name)


def delete_policy(runtime: Runtime, name: str) -> None:
    """Soft-delete the live policy NAME: get_policy answers None for it from now on; history keeps its id."""
    with catalog_write(runtime) as write:
        row = store.find_live_policy(write.conn, name, lock=True)
        if row is None:
            raise PolicyNotFound(message=f"no policy named {name[:200]!r}")
        store.soft_delete_policies(write.conn, [row["id"]])
        write.changed = True
