"""Start the fake upstream for a test and drive it through its control API.

`start_fake_upstream()` serves it on a free loopback port, on a background thread of the test
process (fast to start) or, with `process=True`, as a `python -m devtools.fake_upstream` subprocess (no shared
GIL with the test: use it for load). Every method goes through the HTTP control API, so both work
the same. Fixture example::

    import pytest
    from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream

    @pytest.fixture(scope="session")
    def fake_upstream():
        upstream = start_fake_upstream()
        yield upstream
        upstream.stop()

    @pytest.fixture(autouse=True)
    def fresh_upstream(fake_upstream: FakeUpstream) -> None:
        fake_upstream.reset()  # counters, recorded calls and behaviours back to the start

    def test_failover_skips_a_revoked_key(fake_upstream: FakeUpstream) -> None:
        fake_upstream.control("sk-revoked", mode="invalid")  # -> 401 in the API's error shape
        fake_upstream.control("sk-busy", mode="rate_limited", retry_after=2, times=1)
        ...  # point the catalog host's base_url at fake_upstream.url and call Relay
        assert fake_upstream.stats()["by_key"]["sk-good"] == 1
        (call,) = fake_upstream.requests(key="sk-good")
        assert "x-relay-key" not in call["headers"]  # header names are lower-case

Host base URL for the catalog: `fake_upstream.url` (no `/v1`; adapters append `/v1/...`).
SDK base URLs: `fake_upstream.openai_base_url` (with `/v1`) and `fake_upstream.url` for anthropic.
Expected token counts: `devtools.fake_upstream.count_tokens` / `plan_turn` (rules in devtools/fake_upstream/content.py).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from devtools.fake_upstream.behaviour import Behaviour, ServerOptions
from devtools.fake_upstream.runner import ServerThread
from devtools.fake_upstream.state import UpstreamState

ROOT = Path(__file__).resolve().parents[2]
CONTROL_TIMEOUT_S = 10


class FakeUpstream:
    """A running fake upstream: its URLs and its control API."""

    def __init__(self, url: str, stopper: ServerThread | subprocess.Popen[bytes]) -> None:
        self.url = url
        self.openai_base_url = url + "/v1"
        self.anthropic_base_url = url
        self._stopper = stopper

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              params: dict[str, Any] | None = None) -> Any:
        """One control API call; raises on any non-2xx answer."""
        response = requests.request(method, f"{self.url}/_control{path}", json=body, params=params,
                                    timeout=CONTROL_TIMEOUT_S)
        if response.status_code >= 400:
            raise RuntimeError(f"fake upstream control {method} {path}: {response.status_code} {response.text}")
        return response.json()

    def control(self, key: str, **behaviour: Any) -> dict[str, Any]:
        """Set `key`'s behaviour: mode, latency_ms, chunk_delay_ms, retry_after, fail_status, times, usage, reply."""
        return self._call("PUT", f"/keys/{quote(key, safe='')}", behaviour)  # type: ignore[no-any-return]

    def forget(self, key: str) -> None:
        """Drop `key`'s own behaviour (back to the default)."""
        requests.delete(f"{self.url}/_control/keys/{quote(key, safe='')}", timeout=CONTROL_TIMEOUT_S)

    def default(self, **behaviour: Any) -> dict[str, Any]:
        """Set the behaviour of keys that have none of their own."""
        return self._call("PUT", "/default", behaviour)  # type: ignore[no-any-return]

    def settings(self, **options: Any) -> dict[str, Any]:
        """Change server-wide options: latency_ms, strict_keys, allow_missing_key, request_log_size."""
        return self._call("PATCH", "/settings", options)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """Counters: total, in_flight, by_key, by_path, by_model, by_status, by_outcome."""
        return self._call("GET", "/stats")  # type: ignore[no-any-return]

    def requests(self, **filters: Any) -> list[dict[str, Any]]:
        """Recorded calls, oldest first; filters: key, path, model, since (seq), limit (newest N)."""
        return self._call("GET", "/requests", params=filters)  # type: ignore[no-any-return]

    def reset(self) -> None:
        """Counters, recorded calls, behaviours and options back to how the server started."""
        self._call("POST", "/reset")

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if isinstance(self._stopper, ServerThread):
            self._stopper.stop()
            return
        if self._stopper.poll() is None:
            self._stopper.terminate()
            try:
                self._stopper.wait(10)
            except subprocess.TimeoutExpired:
                self._stopper.kill()
                self._stopper.wait(10)

    def __enter__(self) -> FakeUpstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_fake_upstream(*, process: bool = False, latency_ms: int = 0, strict_keys: bool = False,
                        keys: tuple[str, ...] = (), allow_missing_key: bool = False) -> FakeUpstream:
    """Start a fake upstream on a free 127.0.0.1 port; `keys` are pre-registered as valid (see `strict_keys`)."""
    if process:
        return _start_process(latency_ms, strict_keys, keys, allow_missing_key)
    options = ServerOptions(latency_ms=latency_ms, strict_keys=strict_keys, allow_missing_key=allow_missing_key)
    server = ServerThread(UpstreamState(options, keys={key: Behaviour() for key in keys}))
    return FakeUpstream(server.start(), server)


def _start_process(latency_ms: int, strict_keys: bool, keys: tuple[str, ...],
                   allow_missing_key: bool) -> FakeUpstream:
    """Run `python -m devtools.fake_upstream --port 0` and read the URL it prints first."""
    argv = [sys.executable, "-m", "devtools.fake_upstream", "--port", "0", "--latency-ms", str(latency_ms)]
    argv += ["--strict-keys"] * strict_keys + ["--allow-missing-key"] * allow_missing_key
    for key in keys:
        argv += ["--key", key]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().decode() if ready else ""
    if "listening on " not in line:
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"the fake upstream did not start (first line: {line!r})")
    return FakeUpstream(line.rsplit("listening on ", 1)[1].strip(), proc)
