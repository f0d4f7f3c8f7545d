"""Shared fixtures: real Postgres and RabbitMQ (started if needed), settings, a Runtime and a Flask app."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from app.runtime import Runtime
from app.settings import Settings
from devtools.seaweedfs import SeaweedFS, start_seaweedfs
from devtools.services import ServiceUrls, ensure_services, fresh_services, worker_db_name

# Every name a test makes global (databases, vhosts, queues, the stacks' `<RELAY_TEST_DB>_<suffix>` databases) starts
# with RELAY_TEST_DB; under pytest-xdist this worker's own `<base>_gwN` replaces it here, for the fixtures that read
# the variable and for every process a test starts.
TEST_DB = os.environ["RELAY_TEST_DB"] = worker_db_name()
pytest_plugins = ["tests.tiers"]  # the tiers' markers and the xdist groups


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> ServiceUrls:
    try:
        ensure_services()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"integration services unavailable under CI: {exc}")
        pytest.skip(f"integration services unavailable: {exc}")
    return fresh_services(TEST_DB)


@pytest.fixture(scope="session")
def settings(services: ServiceUrls, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    payload_dir = tmp_path_factory.mktemp("payloads")
    return Settings(
        database_url=services.database_url,
        broker_url=services.broker_url,
        admin_token="test-admin-" + secrets.token_hex(16),
        secret_key="test-secret-" + secrets.token_hex(16),
        batch_payload_dir=str(payload_dir),
        cache_poll_interval_s=0.2,
        queue_name=f"relay.batch_items.{TEST_DB}",
    )


@pytest.fixture(scope="session")
def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as RELAY_* variables, for subprocesses (API, workers)."""
    env = dict(os.environ)
    for name, value in settings.__dict__.items():
        env["RELAY_" + name.upper()] = str(value)
    env["RELAY_WORKER_METRICS_PORT"] = "0"  # no workers' metrics server: a taken port would stop `relay worker`
    return env


@pytest.fixture(scope="session")
def runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.build(settings)
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def app(runtime: Runtime):  # type: ignore[no-untyped-def]
    from app import create_app

    return create_app(runtime=runtime)


@pytest.fixture()
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture(scope="session")
def relay_api(settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real `relay api` (gunicorn) on a free loopback port, sharing the test database."""
    from devtools.processes import start_api

    api = start_api(settings_env, tmp_path_factory.mktemp("api-logs"))
    yield api
    api.stop()


@pytest.fixture(scope="session")
def admin(app, settings):  # type: ignore[no-untyped-def]
    """Call the admin API with the admin token: admin("POST", "/admin/relay-keys", json=...)."""
    client = app.test_client()

    def call(method: str, path: str, **kwargs):  # type: ignore[no-untyped-def]
        headers = {"Authorization": f"Bearer {settings.admin_token}", **kwargs.pop("headers", {})}
        return client.open(path, method=method, headers=headers, **kwargs)

    return call


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
