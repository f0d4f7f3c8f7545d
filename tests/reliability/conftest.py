"""Fixtures for fault tests: a fake upstream in its own process, a Relay stack on its own database and vhost of
the shared services, and a second stack on private Postgres + RabbitMQ that tests may stop and restart."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.services import ServiceUrls
from devtools.stack import Stack
from tests.reliability.private_services import PrivateServices

REQUEST_LOG_SIZE = 200_000  # every call of a fault test's batch stays in the fake upstream's log


@pytest.fixture(scope="session")
def fault_upstream() -> Iterator[FakeUpstream]:
    """The fake upstream as its own process, so 16 concurrent item calls do not share the test's GIL."""
    upstream = start_fake_upstream(process=True)
    upstream.settings(request_log_size=REQUEST_LOG_SIZE)
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session")
def stack(services: ServiceUrls, fault_upstream: FakeUpstream,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Relay on the shared services, with a database and vhost of its own (its catalog replaces nobody's)."""
    built = Stack.on_own_services("faults", upstream=fault_upstream, workdir=tmp_path_factory.mktemp("fault-stack"))
    yield built
    built.close()


@pytest.fixture(scope="session")
def private_services() -> Iterator[PrivateServices]:
    """Postgres and RabbitMQ of this session alone, on free ports, stopped at the end.

    Their folder is not under pytest's own temporary folder: every pytest session run by the same user sets that
    one back to mode 0700, and the postgres user could then no longer reach its data (pg_ctl: Permission denied)."""
    directory = Path(tempfile.mkdtemp(prefix="relay-private-services-"))
    found = PrivateServices.allocate(directory)
    try:
        found.up()
    except Exception as exc:
        found.down()
        pytest.fail(f"private Postgres/RabbitMQ did not start: {exc}")
    yield found
    found.down()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def private_stack(private_services: PrivateServices, fault_upstream: FakeUpstream,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Relay on the private services: for the tests that restart Postgres or RabbitMQ."""
    url = private_services.create_database("relay_faults")
    built = Stack.build(database_url=url, broker_url=private_services.broker_url, upstream=fault_upstream,
                        workdir=tmp_path_factory.mktemp("private-stack"), queue_name="relay.batch_items")
    yield built
    built.close()


@pytest.fixture()
def fresh_upstream(fault_upstream: FakeUpstream) -> FakeUpstream:
    """The fake upstream with its counters, log and behaviours back to the start (and a log that keeps all)."""
    fault_upstream.reset()
    fault_upstream.settings(request_log_size=REQUEST_LOG_SIZE)
    return fault_upstream


@pytest.fixture()
def shared(stack: Stack, fresh_upstream: FakeUpstream) -> Iterator[Stack]:
    """The shared-services stack for one test; every process the test started is killed afterwards."""
    yield stack
    stack.stop_processes()


@pytest.fixture()
def private(private_stack: Stack, fresh_upstream: FakeUpstream) -> Iterator[Stack]:
    """The private-services stack for one test; every process the test started is killed afterwards."""
    yield private_stack
    private_stack.stop_processes()
