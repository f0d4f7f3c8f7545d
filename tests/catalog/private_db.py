"""A database of the catalog and credential tests' own.

Their applies replace the whole catalog (that is what apply does), so sharing the session database would wipe
the catalogs other test packages set up once per session, and theirs would wipe ours. The settings are the
session's with another database; the Runtime and app are built once per process.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
from typing import Any

import psycopg
from flask import Flask

from app.migrate import apply_migrations
from app.runtime import Runtime
from app.settings import Settings
from devtools.services import ADMIN_DB_URL

_built: dict[str, Any] = {}


def private_settings(shared: Settings) -> Settings:
    """SHARED with its own fresh, migrated database (created on first use)."""
    if "settings" not in _built:
        name = os.environ.get("RELAY_TEST_DB", "relay_test") + "_catalog"
        with psycopg.connect(ADMIN_DB_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        url = shared.database_url.rsplit("/", 1)[0] + "/" + name
        apply_migrations(url)
        _built["settings"] = dataclasses.replace(shared, database_url=url)
    settings: Settings = _built["settings"]
    return settings


def private_runtime(shared: Settings) -> Runtime:
    """The Runtime on the private database (closed when the process exits)."""
    if "runtime" not in _built:
        runtime = Runtime.build(private_settings(shared))
        atexit.register(runtime.close)
        _built["runtime"] = runtime
    built: Runtime = _built["runtime"]
    return built


def private_app(shared: Settings) -> Flask:
    """The Flask app on the private Runtime."""
    if "app" not in _built:
        from app import create_app

        _built["app"] = create_app(runtime=private_runtime(shared))
    app: Flask = _built["app"]
    return app
