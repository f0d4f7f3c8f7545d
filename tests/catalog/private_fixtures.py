"""Fixtures that move a test package onto the catalog tests' own database (imported by its conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from app.runtime import Runtime
from app.settings import Settings
from tests.catalog.helpers import relay  # noqa: F401  (a fixture)
from tests.catalog.private_db import private_app, private_runtime, private_settings


@pytest.fixture(scope="session")
def settings(settings: Settings) -> Settings:
    return private_settings(settings)


@pytest.fixture(scope="session")
def settings_env(settings_env: dict[str, str], settings: Settings) -> dict[str, str]:
    return {**settings_env, "RELAY_DATABASE_URL": settings.database_url}


@pytest.fixture(scope="session")
def runtime(settings: Settings) -> Iterator[Runtime]:
    yield private_runtime(settings)


@pytest.fixture(scope="session")
def app(settings: Settings) -> Flask:
    return private_app(settings)


@pytest.fixture()
def client(app: Flask):  # type: ignore[no-untyped-def]
    return app.test_client()
