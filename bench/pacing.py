"""Pacing (issue #24): a paced batch under its policy's limits with live calls beside it, and a batch on a host key
that answers 429 past its own rate.

- paced: PACED_ITEMS items of a policy of PACED_LIMIT requests per PACED_WINDOW_S with `batch: {pace: true,
  share: PACED_SHARE}`: the batch's rate against its share of the limit (target >= 0.95x), items discarded
  rate_limited (target 0); live calls of the same policy at PACED_LIVE_PER_MIN meanwhile: 429s (target 0) and their
  p99 against the same calls with no batch running (target: within 2 ms);
- backoff: RPS_ITEMS items on a key the fake upstream answers 429 past RPS_KEY_LIMIT calls a second: items that
  failed on a 429 (target <= 2%) and the drain rate against the key's (target >= 0.9x).

And pacedlive (issue #39): live calls of the paced policy, one every PACED_LIVE_EVERY_S on a PACED_LIVE_LATENCY_MS
upstream, alone and then beside a paced PACED_LIVE_ITEMS-item batch of the same policy: their p99 with the batch
minus without (target: within 5 ms) and the calls refused (target 0)."""

from __future__ import annotations

import json
import statistics
import threading
import time

import requests

from bench.env import KEYS, BenchEnv, batch_body, item_body
from bench.live import Target, p99, post
from bench.report import Results
from bench.sizes import Sizes

PACED_OVER_SHARE = 0.95
P99_WITHIN_MS = 2.0
FAILED_429 = 0.02
RPS_OVER_KEY = 0.9
PACED_LIVE_P99_WITHIN_MS = 5.0
BURST_WINDOW_S = 0.1


def pacing(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    for _ in range(repeat):
        _paced(env, sizes, results)
        _backoff(env, sizes, results)


def _paced(env: BenchEnv, sizes: Sizes, results: Results) -> None:
    share = sizes.paced_share * sizes.paced_limit * 60 / sizes.paced_window_s  # batch items a minute
    label = (f"{sizes.paced_limit:,}/{sizes.paced_window_s}s, share {sizes.paced_share:g}, "
             f"{sizes.paced_items:,} items")
    baseline = _live_calls(env, sizes.paced_live_per_min, sizes.paced_live_baseline_s)
    body, _ = batch_body(sizes.paced_items)
    stop = threading.Event()
    during: list[tuple[int, float]] = []
    live = threading.Thread(target=lambda: during.extend(_live_until(env, sizes.paced_live_per_min, stop)))
    batch_id, _ = env.post_batch("paced", body)
    accepted = time.time()
    live.start()
    try:
        env.wait_final(batch_id, sizes.paced_items, timeout=4 * sizes.paced_items / share * 60 + 120)
    finally:
        stop.set()
        live.join()
    elapsed = env.last_finished(batch_id) - accepted
    limited = env.conn.execute("SELECT count(*) FROM batch_items WHERE batch_id = %s AND error_code = 'rate_limited'",
                               (batch_id,)).fetchone()
    env.forget_batch(batch_id)
    rate = sizes.paced_items / elapsed * 60
    results.add("pacing", f"{label}: items/min", rate, "items/min", baseline=share,
                baseline_name="the batch share of the limit")
    results.add("pacing", f"{label}: items/min ÷ the batch share", rate / share, "x",
                target=(">=", PACED_OVER_SHARE))
    results.add("pacing", f"{label}: items discarded rate_limited", int(limited[0] if limited else 0), "",
                target=("<=", 0))
    times = [t for status, t in during if status == 200]
    results.add("pacing", f"{label}: live calls at {sizes.paced_live_per_min}/min meanwhile: 429s",
                sum(1 for status, _ in during if status == 429), "", target=("<=", 0))
    base = [t for status, t in baseline if status == 200]
    if times and base:
        results.add("pacing", f"{label}: live p99 with the batch minus without", (p99(times) - p99(base)) * 1000, "ms",
                    target=("<=", P99_WITHIN_MS), baseline=p99(base) * 1000, baseline_name="live p99 with no batch")


def _backoff(env: BenchEnv, sizes: Sizes, results: Results) -> None:
    label = f"key answering 429 past {sizes.rps_key_limit}/s, {sizes.rps_items:,} items"
    body, _ = batch_body(sizes.rps_items)
    batch_id, _ = env.post_batch("rps", body)
    accepted = time.time()
    env.wait_final(batch_id, sizes.rps_items, timeout=10 * sizes.rps_items / sizes.rps_key_limit + 120)
    elapsed = env.last_finished(batch_id) - accepted
    row = env.conn.execute("SELECT count(*) FROM usage_events WHERE batch_id = %s AND upstream_status = 429",
                           (batch_id,)).fetchone()
    env.forget_batch(batch_id)
    failed = int(row[0]) if row else 0
    rate = sizes.rps_items / elapsed
    results.add("pacing", f"{label}: items failed on the key's 429", failed / sizes.rps_items * 100, "%",
                target=("<=", FAILED_429 * 100))
    results.add("pacing", f"{label}: drain rate ÷ the key's", rate / sizes.rps_key_limit, "x",
                target=(">=", RPS_OVER_KEY), baseline=float(sizes.rps_key_limit), baseline_name="the key's rate")


def paced_live(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Live calls' tail beside a paced batch of their own policy, on a PACED_LIVE_LATENCY_MS upstream."""
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    env.upstream.control(KEYS["paced"], latency_ms=sizes.paced_live_latency_ms)
    try:
        for _ in range(repeat):
            _paced_live(env, sizes, results)
    finally:
        env.upstream.control(KEYS["paced"], latency_ms=0)


def _paced_live(env: BenchEnv, sizes: Sizes, results: Results) -> None:
    per_min = round(60 / sizes.paced_live_every_s)
    rate = sizes.paced_share * sizes.paced_limit / sizes.paced_window_s  # batch items a second
    label = (f"{sizes.paced_limit:,}/{sizes.paced_window_s}s, share {sizes.paced_share:g}, "
             f"{sizes.paced_live_latency_ms} ms upstream, {sizes.paced_live_items:,} paced items: live calls every "
             f"{sizes.paced_live_every_s:g} s")
    baseline = _live_calls(env, per_min, sizes.paced_live_items / rate)
    stop = threading.Event()
    during: list[tuple[int, float]] = []
    live = threading.Thread(target=lambda: during.extend(_live_until(env, per_min, stop)))
    batch_id, _ = env.post_batch("paced", batch_body(sizes.paced_live_items)[0])
    live.start()
    try:
        env.wait_final(batch_id, sizes.paced_live_items, timeout=4 * sizes.paced_live_items / rate + 120)
    finally:
        stop.set()
        live.join()
    busiest = _busiest_starts(env, batch_id, BURST_WINDOW_S)
    env.forget_batch(batch_id)
    results.add("pacing", f"{label}: batch items started in the busiest {BURST_WINDOW_S:g} s", busiest, "items",
                baseline=rate * BURST_WINDOW_S, baseline_name=f"the share's {BURST_WINDOW_S:g} s")
    refused = sum(1 for status, _ in during + baseline if status != 200)
    results.add("pacing", f"{label}: refused (any status but 200)", refused, "", target=("<=", 0))
    times, base = [t for s, t in during if s == 200], [t for s, t in baseline if s == 200]
    if times and base:
        results.add("pacing", f"{label}: p99 with the batch minus without", (p99(times) - p99(base)) * 1000,
                    "ms", target=("<=", PACED_LIVE_P99_WITHIN_MS), baseline=p99(base) * 1000,
                    baseline_name="live p99 with no batch")
        results.add("pacing", f"{label}: p50 with the batch minus without",
                    (statistics.median(times) - statistics.median(base)) * 1000, "ms")


def _busiest_starts(env: BenchEnv, batch_id: str, window_s: float) -> int:
    """The most items of BATCH_ID claimed within any WINDOW_S: how bursty its start was, whatever the machine's load."""
    rows = env.conn.execute("SELECT extract(epoch FROM started_at)::float8 FROM batch_items WHERE batch_id = %s"
                            " AND started_at IS NOT NULL ORDER BY started_at", (batch_id,)).fetchall()
    starts, most, first = [float(r[0]) for r in rows], 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def _live_calls(env: BenchEnv, per_min: int, seconds: float) -> list[tuple[int, float]]:
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    return _live_until(env, per_min, stop)


def _live_until(env: BenchEnv, per_min: int, stop: threading.Event) -> list[tuple[int, float]]:
    """Live calls of the paced policy at PER_MIN a minute until STOP: (status, seconds) of each."""
    target = (f"{env.api_url}/v1/chat/completions", env.keys["paced"])
    body = json.dumps(item_body(0)).encode()
    every = 60.0 / per_min
    found: list[tuple[int, float]] = []
    with requests.Session() as session:
        post(session, Target(f"{env.api_url}/v1/chat/completions", env.keys["fast"]), body)  # warm the connection
        due = time.monotonic()
        headers = {"Authorization": f"Bearer {target[1]}", "content-type": "application/json"}
        while not stop.is_set():
            started = time.perf_counter()
            status = session.post(target[0], data=body, timeout=60, headers=headers).status_code
            found.append((status, time.perf_counter() - started))
            due += every
            stop.wait(max(0.0, due - time.monotonic()))
    return found
