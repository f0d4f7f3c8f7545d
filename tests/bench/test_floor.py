"""The bench's floor peers (bench/floor.py): Relay's server and upstream client forwarding a body and nothing else,
as a bare WSGI app and in a bare Flask route, started on a port the OS picks, answering with the upstream's
answer."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from bench.floor import start_floor
from bench.peers import PEERS
from devtools.fake_upstream.harness import start_fake_upstream

pytestmark = pytest.mark.integration

KEY = "sk-floor-test"


@pytest.mark.parametrize("flask", [False, True], ids=["wsgi", "flask"])
def test_the_floor_forwards_a_call_with_its_own_key_and_passes_the_answer_back(flask: bool, tmp_path: Path) -> None:
    assert {"floor", "floor-flask"} <= set(PEERS)
    with start_fake_upstream(keys=(KEY,), strict_keys=True) as upstream:
        floor = start_floor(upstream.url, KEY, tmp_path / "floor.log", flask=flask)
        try:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}
            with requests.Session() as session:  # kept alive: the second call reuses the upstream connection
                answers = [session.post(f"{floor.url}/v1/chat/completions", json=body, timeout=60) for _ in range(2)]
                missing = session.post(f"{floor.url}/v1/no-such-route", json=body, timeout=60)
            for answer in answers:
                assert answer.status_code == 200, answer.text
                assert answer.headers["content-type"].startswith("application/json")
                assert answer.json()["model"] == "gpt-4o-mini" and answer.json()["choices"]
            assert missing.status_code == 404  # the upstream's status, passed on
            seen = upstream.requests(path="/v1/chat/completions")
            assert len(seen) == 2 and {r["key"] for r in seen} == {KEY}  # strict keys: any other was refused
        finally:
            floor.stop()
    assert floor.proc.poll() is not None
