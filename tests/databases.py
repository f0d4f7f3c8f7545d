"""The session fixtures of a test database, on this worker's database or on one of a test folder's own.

A folder whose tests apply a catalog (`PUT /admin/catalog` replaces the whole of it, relay keys of a removed
principal die with it) takes a database and vhost of its own, `<worker's>_<folder>`: its conftest.py binds
`services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("<folder>")`. Its catalog,
keys, batches and usage then never meet another folder's, in whatever order a worker runs the files (scheduled by
file, a worker runs folder A's files, then B's, then A's again). Every session fixture that depends on `settings`
is among these seven: a root one left out would be built once per worker, on the first folder's database.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.runtime import Runtime
from app.settings import Settings
from devtools.services import ServiceUrls, ensure_services, fresh_services, worker_db_name

# Every name a test makes global (databases, vhosts, queues, the stacks' `<RELAY_TEST_DB>_<suffix>` databases) starts
# with RELAY_TEST_DB; under pytest-xdist this worker's own `<base>_gwN` replaces it here, for the fixtures that read
# the variable and for every process a test starts.
TEST_DB = os.environ["RELAY_TEST_DB"] = worker_db_name()


def database_fixtures(folder: str | None = None) -> tuple[Any, ...]:
    """The fixtures services, settings, settings_env, runtime, app, admin and relay_api (session-scoped) on the
    worker's database (FOLDER None, tests/conftest.py) or on `<worker's>_<FOLDER>`, made fresh on first use."""
    return (_services(folder), _settings(folder), _fixture(_settings_env), _fixture(_runtime), _fixture(_app),
            _fixture(_admin), _fixture(_relay_api))


def _fixture(function: Callable[..., Any]) -> Any:
    """FUNCTION as a session fixture named without its leading underscore: a new definition on each call, so each
    conftest.py binding one has an instance of its own."""
    return pytest.fixture(scope="session", name=function.__name__.lstrip("_"))(function)


def _services(folder: str | None) -> Any:
    if folder is not None:
        name = f"{TEST_DB}_{folder}"

        @pytest.fixture(scope="session", name="services")
        def own_services(services: ServiceUrls) -> ServiceUrls:  # the worker's: Postgres and RabbitMQ are up
            return fresh_services(name)

        return own_services

    @pytest.fixture(scope="session", name="services")
    def worker_services() -> ServiceUrls:
        try:
            ensure_services()
        except Exception as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"integration services unavailable under CI: {exc}")
            pytest.skip(f"integration services unavailable: {exc}")
        return fresh_services(TEST_DB)

    return worker_services


def _settings(folder: str | None) -> Any:
    name = TEST_DB if folder is None else f"{TEST_DB}_{folder}"

    @pytest.fixture(scope="session", name="settings")
    def settings(services: ServiceUrls, tmp_path_factory: pytest.TempPathFactory) -> Settings:
        return Settings(
            database_url=services.database_url,
            broker_url=services.broker_url,
            admin_token="test-admin-" + secrets.token_hex(16),
            secret_key="test-secret-" + secrets.token_hex(16),
            batch_payload_dir=str(tmp_path_factory.mktemp("payloads")),
            queue_name=f"relay.batch_items.{name}",
        )

    return settings


def _settings_env(settings: Settings) -> dict[str, str]:
    """The settings as RELAY_* variables, for subprocesses (API, workers)."""
    env = dict(os.environ)
    for name, value in settings.__dict__.items():
        env["RELAY_" + name.upper()] = str(value)
    env["RELAY_WORKER_METRICS_PORT"] = "0"  # no workers' metrics server: a taken port would stop `relay worker`
    return env


def _runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.build(settings)
    yield rt
    rt.close()


def _app(runtime: Runtime) -> Any:
    from app.api.factory import create_app

    return create_app(runtime=runtime)


def _admin(app: Any, settings: Settings) -> Callable[..., Any]:
    """Call the admin API with the admin token: admin("POST", "/admin/relay-keys", json=...)."""
    client = app.test_client()

    def call(method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {settings.admin_token}", **kwargs.pop("headers", {})}
        return client.open(path, method=method, headers=headers, **kwargs)

    return call


def _relay_api(settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real `relay api` (gunicorn) on a free loopback port, sharing the test database."""
    from devtools.processes import start_api

    api = start_api(settings_env, tmp_path_factory.mktemp("api-logs"))
    yield api
    api.stop()
