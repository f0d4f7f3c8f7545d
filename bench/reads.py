"""Reads on a large finished batch: GET /v1/batches/{id} latency and streaming every result, with the API's
memory watched; and live overhead: POST /v1/chat/completions through Relay against a direct call."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable

import requests

from bench import sysstat
from bench.baselines import read_results_bare
from bench.env import KEYS, BenchEnv, batch_body, item_body
from bench.report import Results
from bench.sizes import Sizes

RESPONSE = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "finish_reason": "length",
                                    "message": {"role": "assistant", "content": "item 0: lorem ipsum " * 3}}],
                       "usage": {"prompt_tokens": 250, "completion_tokens": 16, "total_tokens": 266}}).encode()


def reads(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """A finished READS_ITEMS batch: p50 of GET /v1/batches/{id}, and results streamed in items/s."""
    env.stop_workers()
    batch_id = _finished_batch(env, sizes.reads_items)
    headers = {"Authorization": f"Bearer {env.keys['fast']}"}
    label = f"{sizes.reads_items:,}-item batch"
    with requests.Session() as session:
        for _ in range(repeat):
            gets = [_timed(lambda: session.get(f"{env.api_url}/v1/batches/{batch_id}", headers=headers, timeout=60))
                    for _ in range(sizes.read_gets)]
            floor = [_timed(lambda: session.get(f"{env.api_url}/healthz", timeout=60)) for _ in range(sizes.read_gets)]
            results.add("reads", f"{label}: GET /v1/batches/{{id}} p50", statistics.median(gets) * 1000, "ms",
                        target=("<=", 50.0), baseline=statistics.median(floor) * 1000, baseline_name="GET /healthz")
            rate, streamed, growth = _stream_results(env, session, batch_id, headers)
            bare = read_results_bare(env.conn, batch_id, env.work / "payloads" / batch_id)
            results.add("reads", f"{label}: results streamed", rate, "items/s", target=(">=", 100_000),
                        baseline=bare, baseline_name="SELECT + read the segment")
            results.add("reads", f"{label}: API memory growth while streaming ÷ results size "
                                 f"({streamed / 2**20:.0f} MiB)", growth / streamed, "x", target=("<=", 0.1))
    env.forget_batch(batch_id)


BENCH_SEGMENT = "responses-0-be7c4000-0.seg"  # named like a worker process's segment


def _finished_batch(env: BenchEnv, count: int) -> str:
    """Submit COUNT items with no worker running, then make them look drained: completed, their responses back
    to back in one segment file, each item's ref pointing into it."""
    body, _ = batch_body(count)
    batch_id, _ = env.post_batch("fast", body)
    (env.work / "payloads" / batch_id / BENCH_SEGMENT).write_bytes(RESPONSE * count)
    env.conn.execute("UPDATE batch_items SET state = 'completed', worker_id = 'bench', started_at = now(),"
                     " finished_at = now(), published_at = now(), response_segment = %s,"
                     " response_offset = idx::bigint * %s, response_length = %s WHERE batch_id = %s",
                     (BENCH_SEGMENT, len(RESPONSE), len(RESPONSE), batch_id))
    env.conn.execute("UPDATE batches SET dispatched_at = now() WHERE id = %s", (batch_id,))
    env.conn.execute("VACUUM ANALYZE batch_items")
    return batch_id


def _stream_results(env: BenchEnv, session: requests.Session, batch_id: str,
                    headers: dict[str, str]) -> tuple[float, int, float]:
    """(items/s, bytes streamed, the API workers' peak memory growth in bytes) of one full results download."""
    pids = env.api_workers()
    rss = {pid: sysstat.memory_kb(pid, "VmRSS") for pid in pids}
    for pid in pids:
        sysstat.reset_peak(pid)
    started = time.perf_counter()
    size = 0
    with session.get(f"{env.api_url}/v1/batches/{batch_id}/results", headers=headers, stream=True,
                     timeout=600) as res:
        res.raise_for_status()
        for chunk in res.iter_content(chunk_size=1 << 16):
            size += len(chunk)
    elapsed = time.perf_counter() - started
    growth_kb = max(sysstat.memory_kb(pid, "VmHWM") - rss[pid] for pid in pids)
    items = env.conn.execute("SELECT total FROM batches WHERE id = %s", (batch_id,)).fetchone()
    return int(items[0]) / elapsed if items else 0.0, size, growth_kb * 1024.0


def live(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Added latency of POST /v1/chat/completions through Relay over the same call sent straight upstream:
    sequential (interleaved) and at LIVE_CLIENTS concurrent keep-alive clients."""
    env.stop_workers()
    body = json.dumps(item_body(0)).encode()
    relay = (f"{env.api_url}/v1/chat/completions", env.keys["fast"])
    direct = (f"{env.upstream.url}/v1/chat/completions", KEYS["fast"])
    for _ in range(repeat):
        seq_relay, seq_direct = _sequential(relay, direct, body, sizes.live_requests)
        _record_overhead(results, "sequential", seq_relay, seq_direct, target=2.0)
        conc_direct = _concurrent(direct, body, sizes.live_requests, sizes.live_clients)
        conc_relay = _concurrent(relay, body, sizes.live_requests, sizes.live_clients)
        _record_overhead(results, f"{sizes.live_clients} concurrent clients", conc_relay, conc_direct, target=None)


def _record_overhead(results: Results, label: str, relay: list[float], direct: list[float],
                     target: float | None) -> None:
    p50_relay, p50_direct = statistics.median(relay) * 1000, statistics.median(direct) * 1000
    p99_relay, p99_direct = _p99(relay) * 1000, _p99(direct) * 1000
    results.add("live", f"{label}: added median latency", p50_relay - p50_direct, "ms",
                target=("<=", target) if target is not None else None, baseline=p50_direct,
                baseline_name="direct call's median")
    results.add("live", f"{label}: added p99 latency", p99_relay - p99_direct, "ms", baseline=p99_direct,
                baseline_name="direct call's p99")


def _sequential(relay: tuple[str, str], direct: tuple[str, str], body: bytes,
                count: int) -> tuple[list[float], list[float]]:
    """COUNT calls each way on two keep-alive sessions, alternating so both see the same machine load."""
    relay_times, direct_times = [], []
    with requests.Session() as rs, requests.Session() as ds:
        for _ in range(5):  # warm both connections and caches
            _post(rs, relay, body)
            _post(ds, direct, body)
        for _ in range(count):
            relay_times.append(_timed(lambda: _post(rs, relay, body)))
            direct_times.append(_timed(lambda: _post(ds, direct, body)))
    return relay_times, direct_times


def _concurrent(target: tuple[str, str], body: bytes, count: int, clients: int) -> list[float]:
    """COUNT calls from CLIENTS threads, each with its own keep-alive session; every call's latency."""
    times: list[float] = []
    lock = threading.Lock()
    per_client = max(1, count // clients)

    def client() -> None:
        mine = []
        with requests.Session() as session:
            _post(session, target, body)
            for _ in range(per_client):
                mine.append(_timed(lambda: _post(session, target, body)))
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def _post(session: requests.Session, target: tuple[str, str], body: bytes) -> requests.Response:
    res = session.post(target[0], data=body, timeout=60,
                       headers={"Authorization": f"Bearer {target[1]}", "content-type": "application/json"})
    if res.status_code != 200:
        raise RuntimeError(f"{target[0]} answered {res.status_code}: {res.text[:300]}")
    return res


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

