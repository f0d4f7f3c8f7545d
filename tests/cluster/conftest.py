"""Fixtures for the cluster tests: one local cluster (scripts/cluster.sh) for this folder's tests, started and removed
here, a fake upstream in its own process, and a Relay stack configured on it as cluster.sh configures its replicas.

The cluster and its stack are package-scoped: the folder is one xdist group (tests/tiers.py), so its tests run one
after another on one worker, and the cluster goes as soon as the last of them is done. Kept for the session, its
idle nodes (three RabbitMQ, four Postgres and their keepers: about 20% of a core) ran on for the rest of that
worker's session (in one measured run, the last five of its twelve minutes)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.cluster.harness import Cluster, ClusterStack
from devtools.fake_upstream.harness import FakeUpstream
from devtools.stack import fault_catalog
from tests.reliability.conftest import fault_upstream, fresh_upstream  # noqa: F401 (the fixtures, shared)

SCENARIOS = ("leader", "mqcut", "pgcut", "failover", "rolling")


def _binaries_missing() -> str:
    if not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        return "rabbitmq-server is not installed"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/pg_basebackup")):
        return "PostgreSQL is not installed"
    return ""


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """Three RabbitMQ nodes and Postgres under pg_auto_failover (a monitor, a primary and two synchronous secondaries),
    on claimed ports, for this folder's tests."""
    missing = _binaries_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cluster tests need the services under CI: {missing}")
        pytest.skip(missing)
    # Not under pytest's base temp: another session's pytest removes old numbered folders while this one runs.
    found = Cluster(Path(tempfile.mkdtemp(prefix="relay-cluster-")))
    try:
        found.up()
    except Exception as exc:
        _remove(found)
        pytest.fail(f"the local cluster did not start: {exc}")
    from app.migrate import apply_migrations

    apply_migrations(found.relay_settings()["database_url"])
    yield found
    _remove(found)


def _remove(found: Cluster) -> None:
    try:
        found.down(kill=True)  # its folder goes next: nothing to stop gracefully
    finally:
        shutil.rmtree(found.directory, ignore_errors=True)


@pytest.fixture(scope="package")
def cluster_stack(cluster: Cluster, fault_upstream: FakeUpstream,  # noqa: F811 (the imported fixture)
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterStack]:
    """Relay on the cluster: the multi-host database URL, the broker list and quorum queues of cluster.sh."""
    settings = cluster.relay_settings()
    built = ClusterStack.build(upstream=fault_upstream, workdir=cluster.directory / "stack",
                               catalog=fault_catalog(fault_upstream.url, SCENARIOS), **settings)
    _declare_item_queues(built)
    yield built
    built.close()
    shutil.copytree(built.logs, tmp_path_factory.mktemp("cluster-logs"), dirs_exist_ok=True)  # kept for a look


def _declare_item_queues(stack: ClusterStack) -> None:
    """Declare the quorum queues through node 1 as a worker would, so their leader is known before workers start."""
    from actors.broker import RelayBroker

    broker = RelayBroker(url=stack.settings.broker_url, confirm_delivery=True, queue_type=stack.settings.queue_type)
    try:
        broker.declare_queue(stack.settings.queue_name, ensure=True)
    finally:
        broker.close()


@pytest.fixture()
def clustered(cluster_stack: ClusterStack,
              fresh_upstream: FakeUpstream) -> Iterator[ClusterStack]:  # noqa: F811 (the imported fixture)
    """The cluster stack for one test: a fresh upstream log; every process the test started is killed after."""
    yield cluster_stack
    cluster_stack.stop_processes()
    cluster_stack.api_urls = []
