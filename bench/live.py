"""The live path: POST /v1/chat/completions through Relay (and through a peer gateway with --peer) against the same
call sent straight to the fake upstream, on keep-alive sessions: sequential added latency, and throughput of 32
concurrent clients."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import requests

from bench.env import KEYS, MODEL, BenchEnv, item_body
from bench.report import Results
from bench.sizes import Sizes


class Target(NamedTuple):
    """Where a call goes: the URL, the bearer key, and any other headers the gateway needs."""

    url: str
    key: str
    headers: Mapping[str, str] = MappingProxyType({})


# Targets: (sequential added p50, p99 in ms; 32 clients' throughput ÷ direct). The real policy's are issue #38's
# (issue #23's were 1.5 ms, 4 ms and 0.85x); the bare policy's and the peers' are issue #23's first ones.
REAL_TARGETS = (0.8, 2.0, 0.9)
BARE_TARGETS = (2.0, 5.0, 0.6)


def live(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Relay on a policy as users write them (rate limits, two keys, a breaker) and on a bare one (no limit, one
    key), then every peer started with --peer, each beside the direct call measured in the same run."""
    env.stop_workers()
    body = json.dumps(item_body(0)).encode()
    direct = Target(f"{env.upstream.url}/v1/chat/completions", KEYS["fast"])
    url = f"{env.api_url}/v1/chat/completions"
    gateways = {"live": (Target(url, env.keys["real"]), REAL_TARGETS),
                "live (bare policy)": (Target(url, env.keys["fast"]), BARE_TARGETS),
                **{f"live ({name})": (Target(f"{peer.url}/v1/chat/completions", peer.key, peer.headers),
                                      BARE_TARGETS)
                   for name, peer in env.peers.items()}}
    for _ in range(repeat):
        for scenario, (gateway, targets) in gateways.items():
            measure_gateway(results, scenario, gateway, direct, body, sizes, targets)


def measure_gateway(results: Results, scenario: str, gateway: Target, direct: Target, body: bytes,
                    sizes: Sizes, targets: tuple[float, float, float] = BARE_TARGETS) -> None:
    seq_gateway, seq_direct = sequential(gateway, direct, body, sizes.live_requests)
    _record_added(results, scenario, "sequential", seq_gateway, seq_direct, targets=targets[:2])
    conc_direct, direct_rate = concurrent(direct, body, sizes.live_requests, sizes.live_clients)
    conc_gateway, gateway_rate = concurrent(gateway, body, sizes.live_requests, sizes.live_clients)
    label = f"{sizes.live_clients} concurrent clients"
    results.add(scenario, f"{label}: requests/s", gateway_rate, "req/s", baseline=direct_rate,
                baseline_name="direct")
    results.add(scenario, f"{label}: throughput ÷ direct", gateway_rate / direct_rate, "x",
                target=(">=", targets[2]))
    _record_added(results, scenario, label, conc_gateway, conc_direct, targets=None)


def _record_added(results: Results, scenario: str, label: str, gateway: list[float], direct: list[float],
                  targets: tuple[float, ...] | None) -> None:
    p50_gateway, p50_direct = statistics.median(gateway) * 1000, statistics.median(direct) * 1000
    p99_gateway, p99_direct = p99(gateway) * 1000, p99(direct) * 1000
    results.add(scenario, f"{label}: added median latency", p50_gateway - p50_direct, "ms",
                target=("<=", targets[0]) if targets else None, baseline=p50_direct,
                baseline_name="direct call's median")
    results.add(scenario, f"{label}: added p99 latency", p99_gateway - p99_direct, "ms",
                target=("<=", targets[1]) if targets else None, baseline=p99_direct,
                baseline_name="direct call's p99")


def sequential(gateway: Target, direct: Target, body: bytes, count: int) -> tuple[list[float], list[float]]:
    """COUNT calls each way on two keep-alive sessions, alternating so both see the same machine load."""
    gateway_times, direct_times = [], []
    with requests.Session() as gs, requests.Session() as ds:
        for _ in range(5):  # warm both connections and caches
            post(gs, gateway, body)
            post(ds, direct, body)
        for _ in range(count):
            gateway_times.append(timed(lambda: post(gs, gateway, body)))
            direct_times.append(timed(lambda: post(ds, direct, body)))
    return gateway_times, direct_times


def concurrent(target: Target, body: bytes, count: int, clients: int) -> tuple[list[float], float]:
    """COUNT calls from CLIENTS threads, each with its own keep-alive session: every call's latency, and calls/s
    from the first call to the last answer."""
    times: list[float] = []
    lock = threading.Lock()
    per_client = max(1, count // clients)
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        mine = []
        with requests.Session() as session:
            post(session, target, body)
            ready.wait()
            for _ in range(per_client):
                mine.append(timed(lambda: post(session, target, body)))
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return times, len(times) / (time.perf_counter() - started)


def post(session: requests.Session, target: Target, body: bytes) -> requests.Response:
    res = session.post(target.url, data=body, timeout=60,
                       headers={"Authorization": f"Bearer {target.key}", "content-type": "application/json",
                                **target.headers})
    if res.status_code != 200:
        raise RuntimeError(f"{target.url} answered {res.status_code}: {res.text[:300]}")
    return res


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def chat_body(content: str, stream: bool = False) -> bytes:
    return json.dumps({"model": MODEL, "max_tokens": 4_000_000, "stream": stream,
                       "messages": [{"role": "user", "content": content}]}).encode()
