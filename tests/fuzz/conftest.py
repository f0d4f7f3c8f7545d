"""Fixtures for bad-input tests: a Relay of their own (database, vhost, catalog, fake upstream in-process), since
the fuzzer may apply whole catalogs, and credentials of every kind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.fake_upstream.harness import start_fake_upstream
from devtools.services import ServiceUrls
from devtools.stack import Stack, fault_catalog


@pytest.fixture(scope="session")
def fuzz_stack(services: ServiceUrls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    upstream = start_fake_upstream()
    built = Stack.on_own_services("fuzz", upstream=upstream, workdir=tmp_path_factory.mktemp("fuzz-stack"))
    yield built
    built.close()
    upstream.stop()


@pytest.fixture(scope="module")
def fuzz_key(fuzz_stack: Stack) -> str:
    """A key of the file's own, on the stack's own catalog: the schemathesis file applies fuzzed catalogs (its
    restore makes the principals new rows, and their earlier keys stop working), and a worker runs the files in any
    order."""
    restore_catalog(fuzz_stack)
    return fuzz_stack.new_key("kill")


def restore_catalog(stack: Stack) -> None:
    """Apply the stack's own catalog again (after a fuzzed catalog replaced it)."""
    res = stack.admin("PUT", "/admin/catalog", json=fault_catalog(stack.upstream.url))
    assert res.status_code == 200, res.get_data(as_text=True)


def error_code(path: str, body: Any) -> Any:
    """The stable error code of an error answer: `error.code` (Relay's and the OpenAI shape) or the Anthropic
    shape's `error.code`."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    return body["error"].get("code")
