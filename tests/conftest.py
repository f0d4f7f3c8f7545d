"""Shared fixtures: real Postgres and RabbitMQ (started if needed), settings, a Runtime, a Flask app, the admin API
and a real `relay api` on this worker's database (tests/databases.py; a folder that applies catalogs binds its
own), and a real S3 server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.seaweedfs import SeaweedFS, start_seaweedfs
from tests.databases import TEST_DB, database_fixtures

__all__ = ["TEST_DB"]
pytest_plugins = ["tests.tiers", "tests.machine_slots"]  # tiers and xdist groups; machine-wide slots

services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures()


@pytest.fixture()
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    """A real S3 server (SeaweedFS on loopback) for the session; its credentials are in the environment the AWS SDK
    reads, here and in the processes tests start."""
    server = start_seaweedfs()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server.credentials().items():
            patch.setenv(name, value)
        yield server
    server.close()
