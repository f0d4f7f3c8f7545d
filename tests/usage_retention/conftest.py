"""A database of this folder's own (tests/databases.py) for usage retention: a purge folds every event before its
cutoff, so no other folder's events may share its database. The usage folder's catalog, with readers of its own."""

from __future__ import annotations

from typing import Any

import pytest

from app.auth import authenticate
from tests.databases import database_fixtures
from tests.usage.conftest import CATALOG, World, admin_headers, new_key, new_token

services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("usage_retention")


@pytest.fixture(scope="session")
def world(app: Any, runtime: Any, settings: Any) -> World:
    """The usage folder's catalog and readers (relay keys KA and KB, tokens TA1 and TB), no events."""
    client = app.test_client()
    res = client.put("/admin/catalog", headers=admin_headers(settings), json=CATALOG)
    assert res.status_code == 200, res.json
    secrets = {"KA": new_key(client, settings, "user", "u-ann", "p-main"),
               "KB": new_key(client, settings, "service_account", "sa-bot", "p-main"),
               "TA1": new_token(client, settings, "u-ann"), "TB": new_token(client, settings, "u-ben")}
    callers = {name: authenticate(runtime, secret) for name, secret in secrets.items()}
    with runtime.pool.connection() as conn:
        host_ids = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM hosts").fetchall()}
    return World(admin=settings.admin_token, secrets=secrets, callers=callers, ids={}, host_ids=host_ids)
