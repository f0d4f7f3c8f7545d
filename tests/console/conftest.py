"""Fixtures for the console's browser tests: a Relay of their own (database, real `relay api` and `relay worker`,
fake upstream, the batch tests' catalog) and one headless Chromium from Debian's packages.

Under CI=true a missing browser fails the run (scripts/test.sh installs it with scripts/browser.sh); elsewhere the
tests are skipped with the command that installs it.

The Relay and the browser are package-scoped: the folder is one xdist group (tests/tiers.py), and they stop once its
last test is done instead of idling through the rest of the worker's session.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster.ports import reserve
from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_api
from devtools.services import MQ_UI_PORT, ServiceUrls, fresh_services
from devtools.stack import Stack
from tests.batches.helpers import batch_catalog
from tests.console.browser import ARTIFACTS, Console, find_chromium, start_chromium

BROKER_UI = f"http://127.0.0.1:{MQ_UI_PORT}/"


@dataclass
class ConsoleWorld:
    """The stack the browser talks to, its API process, and the workers (started when a test asks)."""

    stack: Stack
    api: RelayProcess
    upstream: FakeUpstream
    workers: list[RelayProcess] = field(default_factory=list)

    def ensure_worker(self, **overrides: Any) -> None:
        if not self.workers:
            self.workers.append(self.stack.start_worker(threads=4, **overrides))

    def stop_workers(self) -> None:
        """No worker runs after this: whatever is submitted next stays queued until ensure_worker()."""
        while self.workers:
            worker = self.workers.pop()
            worker.stop()
            self.stack.processes.remove(worker)

    def stop_api(self) -> None:
        """The API goes away at once (a crash, or a restart's gap); start_api_again() brings it back on the same
        address."""
        self.api.stop(signal.SIGKILL)
        self.stack.processes.remove(self.api)

    def start_api_again(self) -> None:
        port = int(self.api.url.rsplit(":", 1)[1])
        self.api = start_api(self.stack.env, self.stack.logs, port=port)
        self.stack.processes.append(self.api)

    def key(self, policy: str = "main", principal: str = "batch-svc") -> dict[str, Any]:
        """A new relay key of the service account (the admin API's answer: `key`, `id`)."""
        res = self.stack.admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                                  "principal": principal, "policy": policy})
        assert res.status_code == 201, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    def token(self, user: str) -> dict[str, Any]:
        res = self.stack.admin("POST", "/admin/tokens", json={"user": user, "ttl_seconds": 3600})
        assert res.status_code == 201, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]


UNPRICED_MODEL = "free-model"


def console_catalog(upstream_url: str) -> dict[str, Any]:
    """The batch tests' catalog plus a model without a price (its cost is unknown, never a made-up zero)."""
    catalog = batch_catalog(upstream_url)
    catalog["models"].append({"name": UNPRICED_MODEL, "bindings": [{"host": "openai", "adapter": "openai",
                                                                     "upstream_model": "gpt-free"}]})
    return catalog


@pytest.fixture(scope="package")
def console_world(services: ServiceUrls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleWorld]:
    name = os.environ.get("RELAY_TEST_DB", "relay_test") + "_console"
    own = fresh_services(name)
    upstream = start_fake_upstream()
    stack = Stack.build(database_url=own.database_url, broker_url=own.broker_url, upstream=upstream,
                        workdir=tmp_path_factory.mktemp("console-stack"), queue_name=f"relay.batch_items.{name}",
                        catalog=console_catalog(upstream.url), broker_ui_url=BROKER_UI)
    # The API restarts on its address (stop_api, start_api_again): a port outside the ephemeral range, claimed, that
    # no outgoing connection can take while it is down.
    [port] = reserve(1, stack.logs)
    world = ConsoleWorld(stack=stack, api=stack.start_api(port=port), upstream=upstream)
    yield world
    stack.close()
    upstream.stop()


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    found = find_chromium()
    if found is None:
        message = "Debian's chromium and chromium-driver are not installed (run: bash scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="package")
def console(chromium: tuple[str, str], console_world: ConsoleWorld,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # this run's screenshots only
    ARTIFACTS.mkdir(parents=True)
    downloads = tmp_path_factory.mktemp("downloads")
    driver = start_chromium(*chromium, downloads)
    try:
        yield Console(driver=driver, url=console_world.api.url, downloads=downloads)
    finally:
        driver.quit()


@pytest.fixture()
def jsonl_file(tmp_path: Path) -> Callable[[list[dict[str, Any]]], Path]:
    def write(bodies: list[dict[str, Any]]) -> Path:
        import json

        path = tmp_path / "requests.jsonl"
        path.write_text("".join(json.dumps(b) + "\n\n" for b in bodies))  # blank lines are skipped
        return path

    return write
