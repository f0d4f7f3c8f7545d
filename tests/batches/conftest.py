"""Fixtures for batch tests: the fake upstream, a catalog on it, relay keys and tokens, and the admin API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_workers
from tests.batches.helpers import batch_catalog
from tests.databases import database_fixtures

# A database and vhost of this folder's own: its catalog replaces no other folder's (tests/databases.py).
services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("batches")

# Fast settings for the worker processes of these tests.
WORKER_SETTINGS = {"batch_item_time_limit_s": 4, "worker_heartbeat_s": 0.5, "worker_lost_after_s": 5}


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeUpstream]:
    fake = start_fake_upstream()
    yield fake
    fake.stop()


@pytest.fixture(scope="module", autouse=True)
def _nothing_of_another_file(runtime, upstream) -> None:  # type: ignore[no-untyped-def]
    """A file starts with the fake upstream's behaviours back to the start and every batch an earlier file left
    unfinished cancelled and finished: a worker runs the folder's files in any order, and items published to the
    workers a file stopped would hold the next file's dispatch window (a file never needs another's batches: under
    xdist it may run on another database)."""
    upstream.reset()
    with runtime.pool.connection() as conn:
        conn.execute("UPDATE batches SET status = 'cancelled', finished_at = now() WHERE finished_at IS NULL")


def module_workers(processes: int = 2, **overrides: Any) -> Any:
    """A module-scoped `workers` fixture: `relay worker` of PROCESSES processes of four threads each, with
    WORKER_SETTINGS and OVERRIDES, for the module's tests (a test file binds `workers = module_workers(...)`)."""

    @pytest.fixture(scope="module", name="workers")
    def workers(settings_env, runtime, catalog, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
        proc = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=processes,
                             threads=4, **(WORKER_SETTINGS | overrides))
        yield proc
        proc.stop()

    return workers


workers = module_workers()


@pytest.fixture()
def fresh_upstream(upstream, workers) -> None:  # type: ignore[no-untyped-def]
    """Workers running and the fake upstream's counters and behaviours back to the start."""
    upstream.reset()


@pytest.fixture(scope="session")
def catalog(admin, upstream) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    doc = batch_catalog(upstream.url)
    res = admin("PUT", "/admin/catalog", json=doc)
    assert res.status_code == 200, res.get_data(as_text=True)
    return doc


@pytest.fixture(scope="session")
def make_key(admin, catalog) -> Callable[..., dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Create a relay key for batch-svc under POLICY; the admin API's answer (with `key` and `id`)."""

    def make(policy: str = "main", **extra: Any) -> dict[str, Any]:
        res = admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                       "principal": "batch-svc", "policy": policy, **extra})
        assert res.status_code == 201, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    return make


@pytest.fixture(scope="session")
def make_token(admin, catalog) -> Callable[..., dict[str, Any]]:  # type: ignore[no-untyped-def]
    def make(user: str = "batch-user", ttl_seconds: int = 3600) -> dict[str, Any]:
        res = admin("POST", "/admin/tokens", json={"user": user, "ttl_seconds": ttl_seconds})
        assert res.status_code == 201, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    return make


@pytest.fixture(scope="module")
def key(make_key) -> str:  # type: ignore[no-untyped-def]
    """A relay key of the module's own: what a module lists by it (a batch owner is a key) is its own batches, in
    whatever order a worker runs the folder's files."""
    return str(make_key()["key"])
