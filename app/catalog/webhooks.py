"""The webhooks of the catalog's projects and teams, as `relay apply` stores them: secrets read at apply time (a
value, or an environment variable), checked, stored encrypted like host keys and matched by position; a webhook
given neither keeps the secrets stored at its position (so an export, which carries none, can be re-applied)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.catalog.secrets import SecretBox
from app.catalog.store import CatalogRows, Row
from schemas.webhooks import secret_bytes

OWNERS = (("projects", "project_id"), ("teams", "team_id"))  # catalog kind, its column in webhook_endpoints
_SECRETS = ("secret", "previous_secret")


def resolve_secrets(doc: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """Read each webhook's secrets (`_secret`, `_previous_secret`) from the document or the environment; the
    problems, by path (never with a value)."""
    problems = []
    for kind, _column in OWNERS:
        for i, owner in enumerate(doc[kind]):
            for w, hook in enumerate(owner["webhooks"]):
                for name in _SECRETS:
                    path = f"{kind}[{i}].webhooks[{w}].{name}"
                    if f"{name}_env" not in hook:
                        if name in hook:
                            hook[f"_{name}"] = hook[name]
                        continue
                    variable = hook[f"{name}_env"]
                    value = env.get(variable)
                    if not value:
                        problems.append(f"{path}_env: environment variable {variable} is not set (it is read when"
                                        " the catalog is applied)")
                        continue
                    try:
                        secret_bytes(value)
                    except ValueError as exc:
                        problems.append(f"{path}_env: the value of {variable} {exc}")
                        continue
                    hook[f"_{name}"] = value
    return problems


def missing_secrets(doc: dict[str, Any], current: CatalogRows) -> list[str]:
    """Webhooks without a secret where none is stored (a new one, or past the positions stored)."""
    problems = []
    for kind, column in OWNERS:
        ids = {r["name"]: r["id"] for r in getattr(current, kind)}
        for i, owner in enumerate(doc[kind]):
            stored = {r["position"] for r in current.webhooks if r[column] == ids.get(owner["name"])}
            for w, hook in enumerate(owner["webhooks"]):
                if "_secret" not in hook and w not in stored:
                    problems.append(f"{kind}[{i}].webhooks[{w}]: give secret or secret_env (a new webhook has no"
                                    " stored secret)")
    return problems


def desired_rows(box: SecretBox, hooks: list[dict[str, Any]], stored: dict[int, Row]) -> list[Row]:
    """The webhook_endpoints values of HOOKS by position; a secret is encrypted again only when it changed (a new
    Fernet token each time would make every apply a change)."""
    rows = []
    for position, hook in enumerate(hooks):
        row = stored.get(position)
        values: Row = {"url": hook["url"], "events": list(hook["events"])}
        if "_secret" in hook:
            for name in _SECRETS:
                value = hook.get(f"_{name}")
                values[f"{name}_env"] = hook.get(f"{name}_env")
                if value is None:
                    values[f"{name}_enc"] = None
                elif row is None or not box.matches(row[f"{name}_enc"], value):
                    values[f"{name}_enc"] = box.encrypt(value)
        rows.append(values)
    return rows
