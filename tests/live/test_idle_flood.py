"""Idle connections cannot take every slot of a real `relay api` (2 processes x 100 connections, a 10-minute header
deadline): with a flood of idle connections held by another process (from one address, or spread over
many), every other caller is still answered at once. One client holding ~2,100 idle connections delayed every
other caller by the 15 s header deadline."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devtools.processes import ROOT, RelayProcess, start_api

pytestmark = pytest.mark.integration

CONNECTIONS = 100  # per server process
FLOOD = 3 * CONNECTIONS  # one and a half times the slots of both processes
# A caller held until an idle connection's header deadline (10 minutes here) ends crosses this bound; an answer
# that only waits for the idle ones accepted before it (each closing another) does not, on any machine. How soon
# callers are answered is a duration, for bench/.
HEADER_TIMEOUT_S = 600
ANSWERED_WITHIN_S = 30.0
CALLER = "127.0.0.2"  # the other caller's own address (all of 127/8 is this host)


@pytest.fixture(scope="module")
def api(settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    env = {**settings_env, "RELAY_API_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), "RELAY_API_IO_TIMEOUT_S": "30"}
    proc = start_api(env, tmp_path_factory.mktemp("flood-api"), workers=2, connections=CONNECTIONS)
    yield proc
    proc.stop()


def flood(api: RelayProcess, sources: list[str], log: Path) -> subprocess.Popen[bytes]:
    parts = urlsplit(api.url)
    with open(log, "wb") as out:  # the process has its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "tests.live.idle_flood", parts.hostname or "127.0.0.1",
                                 str(parts.port), str(FLOOD), "--sources", ",".join(sources)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)


def wait_until_held(log: Path, at_least: int, timeout: float = 20) -> None:
    """Until the flood reports holding AT_LEAST connections open at once (it reports once a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = log.read_text().split("\n") if log.exists() else []
        held = [int(line.split()[-1]) for line in lines if line.startswith("opened ")]
        if held and held[-1] >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"the flood never held {at_least} connections: {log.read_text()[-500:]}")


def slow_answers(api: RelayProcess, count: int) -> list[tuple[str, int, float]]:
    """COUNT requests from CALLER, each on a new connection (as a new caller), until one is not a 200 within
    ANSWERED_WITHIN_S: (path, status, seconds) of that one."""
    parts = urlsplit(api.url)
    for n in range(count):
        path = "/readyz" if n % 2 else "/healthz"
        started = time.monotonic()
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=2 * ANSWERED_WITHIN_S,
                                          source_address=(CALLER, 0))
        try:
            conn.request("GET", path)
            status = conn.getresponse().status
        except OSError:
            status = 0
        finally:
            conn.close()
        took = time.monotonic() - started
        if status != 200 or took > ANSWERED_WITHIN_S:
            return [(path, status, round(took, 3))]
    return []


@pytest.mark.parametrize("sources", [["127.0.0.1"], [f"127.0.1.{n}" for n in range(1, 21)]],
                         ids=["one address", "twenty addresses"])
def test_a_flood_of_idle_connections_does_not_delay_other_callers(api: RelayProcess, tmp_path: Path,
                                                                   sources: list[str]) -> None:
    log = tmp_path / "flood.log"
    flooder = flood(api, sources, log)
    try:
        wait_until_held(log, 2 * CONNECTIONS if len(sources) > 1 else CONNECTIONS)
        assert not slow_answers(api, 20)
    finally:
        flooder.kill()
        flooder.wait(10)
