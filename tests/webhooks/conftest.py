"""Fixtures for webhook tests: a Relay stack on a database and vhost of its own (fast retries, loopback allowed), a
real receiver process on a free loopback port, worker processes, and catalogs whose projects and teams point at
the receiver."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_api
from devtools.services import ServiceUrls, fresh_services
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.reliability.conftest import private_services  # noqa: F401  (the RabbitMQ restart test's services)
from tests.webhooks.helpers import HOOK_SETTINGS, hooks_catalog


@pytest.fixture(scope="session")
def hooks_upstream() -> Iterator[FakeUpstream]:
    upstream = start_fake_upstream(process=True)
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    found = Receiver(log_path=tmp_path_factory.mktemp("receiver") / "receiver.log").start()
    yield found
    found.stop()


@pytest.fixture(scope="session")
def hooks_stack(services: ServiceUrls, hooks_upstream: FakeUpstream, receiver: Receiver,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Relay on the shared services with a database and vhost of its own; its catalog points at the receiver."""
    name = os.environ.get("RELAY_TEST_DB", "relay_test") + "_webhooks"
    own = fresh_services(name)
    built = Stack.build(database_url=own.database_url, broker_url=own.broker_url, upstream=hooks_upstream,
                        workdir=tmp_path_factory.mktemp("webhook-stack"), queue_name=f"relay.batch_items.{name}",
                        catalog=hooks_catalog(hooks_upstream.url, receiver.url), **HOOK_SETTINGS)
    yield built
    built.close()


@pytest.fixture(scope="session")
def hooks_api(hooks_stack: Stack) -> Iterator[RelayProcess]:
    """A real `relay api` of the stack, for the official SDKs (kept for the session)."""
    api = start_api(hooks_stack.env, hooks_stack.logs, workers=1)
    yield api
    api.stop()


@pytest.fixture()
def stack(hooks_stack: Stack, receiver: Receiver) -> Iterator[Stack]:
    """The stack for one test: the receiver up, answering 200, with nothing kept; the catalog back to its start;
    afterwards every process the test started killed, and what it left unfinished settled without an event."""
    if receiver.proc is None:
        receiver.start()
    receiver.reset()
    hooks_stack.upstream.reset()
    apply = hooks_stack.admin("PUT", "/admin/catalog", json=hooks_catalog(hooks_stack.upstream.url, receiver.url))
    assert apply.status_code == 200, apply.get_data(as_text=True)
    yield hooks_stack
    hooks_stack.stop_processes()
    with hooks_stack.runtime.pool.connection() as conn:
        conn.execute("UPDATE batches SET finished_at = now() WHERE finished_at IS NULL")
        conn.execute("UPDATE webhook_deliveries SET state = 'failed' WHERE state = 'pending'")


@pytest.fixture()
def worker(stack: Stack) -> RelayProcess:
    """One `relay worker -p 1 -t 4` with the fast webhook settings."""
    return stack.start_worker(threads=4)


@pytest.fixture()
def apply_catalog(stack: Stack, receiver: Receiver) -> Callable[..., None]:
    """Apply the test catalog with other webhooks: apply_catalog(project=[...], team=[...])."""

    def apply(**hooks: Any) -> None:
        res = stack.admin("PUT", "/admin/catalog", json=hooks_catalog(stack.upstream.url, receiver.url, **hooks))
        assert res.status_code == 200, res.get_data(as_text=True)

    return apply
