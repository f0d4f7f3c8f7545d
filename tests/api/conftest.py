"""Admin API tests apply whole catalogs: they run on the catalog tests' own database."""

from __future__ import annotations

import pytest

from tests.catalog.private_db import private_app, private_runtime


@pytest.fixture(scope="module")
def runtime(settings):  # type: ignore[no-untyped-def]
    return private_runtime(settings)


@pytest.fixture(scope="module")
def app(settings):  # type: ignore[no-untyped-def]
    return private_app(settings)


@pytest.fixture()
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()
