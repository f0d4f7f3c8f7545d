"""Keep-alive works without Nagle delays, and many slow calls are served concurrently."""


from __future__ import annotations

import asyncio

import aiohttp
import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "one two three four five six seven eight"}]}
HEADERS = {"Authorization": "Bearer sk-perf"}


def test_keep_alive_calls_reuse_one_connection(upstream: FakeUpstream) -> None:
    with requests.Session() as session:
        for _ in range(20):
            session.post(upstream.url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=HEADERS,
                         timeout=10).content
            session.post(upstream.url + "/v1/chat/completions", json=CHAT, headers=HEADERS, timeout=10).json()
    assert len({r["peer"] for r in upstream.requests()}) == 1


def test_five_hundred_slow_calls_are_all_in_flight_at_once(upstream: FakeUpstream) -> None:
    upstream.settings(latency_ms=5000)  # long enough for every call to arrive before the first answers

    async def run() -> tuple[list[int], int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async def one() -> int:
                async with session.post(upstream.url + "/v1/chat/completions", json=CHAT, headers=HEADERS) as r:
                    await r.read()
                    return r.status

            calls = asyncio.gather(*(one() for _ in range(500)))
            most = 0
            while not calls.done():
                async with session.get(upstream.url + "/_control/stats") as r:
                    most = max(most, (await r.json())["in_flight"])
                await asyncio.sleep(0.2)
            return await calls, most

    statuses, most_in_flight = asyncio.run(run())
    assert statuses == [200] * 500
    assert most_in_flight == 500


def test_server_sockets_have_tcp_nodelay(upstream: FakeUpstream) -> None:
    health = requests.get(upstream.url + "/_control/health", timeout=10).json()
    assert health == {"ok": True, "tcp_nodelay": True}
