"""Keep-alive works without Nagle delays, and many slow calls are served concurrently."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import requests

from tests.fake_upstream.harness import FakeUpstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "one two three four five six seven eight"}]}
HEADERS = {"Authorization": "Bearer sk-perf"}


def test_keep_alive_calls_reuse_one_connection_without_nagle_delays(upstream: FakeUpstream) -> None:
    with requests.Session() as session:
        session.post(upstream.url + "/v1/chat/completions", json=CHAT, headers=HEADERS, timeout=10)
        started = time.monotonic()
        for _ in range(20):
            session.post(upstream.url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=HEADERS,
                         timeout=10).content
            session.post(upstream.url + "/v1/chat/completions", json=CHAT, headers=HEADERS, timeout=10).json()
        per_call = (time.monotonic() - started) / 40
    assert per_call < 0.035, f"{per_call * 1000:.1f} ms per keep-alive call: Nagle/delayed-ACK stall?"
    assert len({r["peer"] for r in upstream.requests()}) == 1


def test_five_hundred_concurrent_calls_with_one_second_latency_finish_together(upstream: FakeUpstream) -> None:
    upstream.settings(latency_ms=1000)

    async def run() -> list[int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async def one() -> int:
                async with session.post(upstream.url + "/v1/chat/completions", json=CHAT, headers=HEADERS) as r:
                    await r.read()
                    return r.status
            return await asyncio.gather(*(one() for _ in range(500)))

    started = time.monotonic()
    statuses = asyncio.run(run())
    elapsed = time.monotonic() - started
    assert statuses == [200] * 500
    assert elapsed < 3.0, f"500 calls of 1 s took {elapsed:.2f} s"


def test_server_sockets_have_tcp_nodelay(upstream: FakeUpstream) -> None:
    health = requests.get(upstream.url + "/_control/health", timeout=10).json()
    assert health == {"ok": True, "tcp_nodelay": True}
