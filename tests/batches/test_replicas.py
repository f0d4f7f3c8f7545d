"""Replicas that do not share the payload directory: load input errors and results without `response`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from app.runtime import Runtime
from devtools.processes import start_workers
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, results, submit, usage_events, wait_finished

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.fixture(scope="module")
def completed_batch(client_factory, key, settings_env, runtime, catalog, tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """A batch run by workers that share the API's payload directory."""
    client = client_factory()
    workers = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=2,
                            **WORKER_SETTINGS)
    try:
        batch_id = submit(client, key, [CHAT, CHAT]).json["id"]
        assert wait_finished(client, key, batch_id)["counts"]["completed"] == 2
    finally:
        workers.stop()
    return str(batch_id)


@pytest.fixture(scope="module")
def client_factory(app):  # type: ignore[no-untyped-def]
    return app.test_client


@pytest.fixture(scope="module")
def other_replica(runtime, tmp_path_factory) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """An API replica on the same database with its own, empty payload directory."""
    from app.api.factory import create_app

    other = Runtime(settings=replace(runtime.settings, batch_payload_dir=str(tmp_path_factory.mktemp("other"))),
                    pool=runtime.pool)
    yield create_app(runtime=other).test_client()
    for service in other.services.values():
        getattr(service, "close", lambda: None)()


def test_a_replica_that_cannot_see_the_request_file_fails_the_item_with_a_load_input_error(
        completed_batch, client, key, settings_env, runtime, tmp_path_factory) -> None:
    foreign = {**settings_env, "RELAY_BATCH_PAYLOAD_DIR": str(tmp_path_factory.mktemp("foreign"))}
    workers = start_workers(foreign, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=2,
                            **WORKER_SETTINGS)
    try:
        batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"])
    finally:
        workers.stop()
    (item,) = batch["items"]
    assert item["state"] == "discarded" and item["error_code"] == "load_input_failed"
    assert item["error"].startswith("load input")
    assert [e["error_code"] for e in usage_events(runtime, batch["id"])] == ["load_input_failed"]


def test_results_served_by_a_replica_without_the_response_file_omit_response(completed_batch, client, key,
                                                                             other_replica) -> None:
    here = results(client, key, completed_batch)
    assert all("response" in r for r in here)
    there = results(other_replica, key, completed_batch)
    assert [(r["idx"], r["state"]) for r in there] == [(0, "completed"), (1, "completed")]
    assert all("response" not in r for r in there)
