"""The tracing tests' fixtures: an OTLP/HTTP receiver, a fake upstream, an app whose tracing exports to the
receiver, and a relay key on the tracing catalog."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from app.observability.tracing import Tracing
from app.runtime import Runtime
from app.settings import Settings
from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.otlp_receiver import OtlpReceiver
from tests.databases import database_fixtures
from tests.observability.tracing_helpers import tracing_catalog
from tests.usage.conftest import admin_headers, new_key

# A database and vhost of this folder's own: its catalog replaces no other folder's (tests/databases.py).
services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("observability")

LOOPBACK_CALLBACKS = {"webhook_allowed_hosts": "127.0.0.1", "webhook_allowed_networks": "127.0.0.0/8"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver().start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def traced_upstream() -> Iterator[FakeUpstream]:
    fake = start_fake_upstream()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def traced(settings: Settings, receiver: OtlpReceiver) -> Iterator[tuple[Any, Runtime]]:
    """An app on a runtime of its own whose tracing exports to the receiver (batches may call back on loopback)."""
    from app.api.factory import create_app

    runtime = Runtime.build(replace(settings, **LOOPBACK_CALLBACKS))
    runtime.services["tracing"] = Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                                    "OTEL_SERVICE_NAME": "relay-api-test"})
    yield create_app(runtime=runtime), runtime
    runtime.close()


@pytest.fixture(scope="module")
def relay_key(traced: tuple[Any, Runtime], settings: Settings, traced_upstream: FakeUpstream) -> str:
    client = traced[0].test_client()
    res = client.put("/admin/catalog", headers=admin_headers(settings), json=tracing_catalog(traced_upstream.url))
    assert res.status_code == 200, res.json
    return new_key(client, settings, "service_account", "tr-svc", "tr-main")
