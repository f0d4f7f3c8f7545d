"""Batch scenarios: accept, drain (zero latency), drain (slow upstream at high concurrency), rate-limited drain,
cancel. Each runs REPEAT times and records one value per figure per run."""

from __future__ import annotations

import math
import threading
import time

import requests

from bench import live, sysstat
from bench.baselines import bare_accept, direct_client
from bench.env import KEYS, BenchEnv, batch_body
from bench.report import Results
from bench.sizes import Sizes

ACCEPT_TARGET_S = {10_000: 1.0, 100_000: 6.0}  # the targets; other sizes: ITEM_BUDGET_S per item
ITEM_BUDGET_S = 1e-4
ACCEPT_OVER_BARE = 1.2  # time to 202 at most this many times the bare baseline
ACCEPT_MEMORY = 2.5  # API peak memory growth at most this many times the body
DRAIN_OVER_CLIENT = 0.9  # drain on the real policy: items/s at least this share of the plain client's (issue #38)
CPU_OVER_CLIENT = 1.3  # drain on the real policy: CPU per item, all processes, at most this many times the client's
POSTGRES_MS = 0.3  # drain on the real policy: Postgres CPU per item at most
SLOW_OVER_IDEAL = 1.1  # slow drain: wall time at most this many times items x latency ÷ concurrency (issue #38)


def accept(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """POST /v1/batches: time to 202 and the API worker's peak memory growth, against the bare cost of reading
    the body (json.loads) and storing it (one file write + one sync)."""
    env.stop_workers()  # nothing drains the accepted batches
    for count in sizes.accept:
        body, _ = batch_body(count)
        for _ in range(repeat):
            pids = env.api_workers()
            rss = {pid: sysstat.memory_kb(pid, "VmRSS") for pid in pids}
            for pid in pids:
                sysstat.reset_peak(pid)
            batch_id, took = env.post_batch("fast", body)
            growth_kb = max(sysstat.memory_kb(pid, "VmHWM") - rss[pid] for pid in pids)
            env.forget_batch(batch_id)
            bare = bare_accept(body, env.work)
            label = f"{count:,} items"
            results.add("accept", f"{label}: time to 202", took, "s",
                        target=("<=", ACCEPT_TARGET_S.get(count, count * ITEM_BUDGET_S)),
                        baseline=bare, baseline_name="json.loads + one write + one sync")
            results.add("accept", f"{label}: time to 202 ÷ bare baseline", took / bare, "x",
                        target=("<=", ACCEPT_OVER_BARE))
            results.add("accept", f"{label}: API peak memory growth ÷ body ({len(body) / 2**20:.0f} MiB)",
                        growth_kb * 1024 / len(body), "x", target=("<=", ACCEPT_MEMORY))


def drain(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Drain items through the workers with a zero-latency upstream, on the real policy and on the bare one: items/s
    and CPU per item, against a plain client sending the same requests straight to the upstream at the same
    concurrency (targets on the real policy's rows)."""
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    body, items = batch_body(sizes.drain)
    for _ in range(repeat):
        for policy in ("real", "fast"):
            drain_once(env, sizes, results, policy, body, items)


def drain_once(env: BenchEnv, sizes: Sizes, results: Results, policy: str, body: bytes, items: list[bytes],
                scenario: str = "") -> None:
    processes, threads = sizes.drain_workers
    real = policy == "real"
    scenario = scenario or ("drain" if real else "drain (bare policy)")
    batch_id, _ = env.post_batch(policy, body)
    accepted, before = time.time(), env.cpu_sample()  # the drain's CPU, not the accept's
    env.wait_final(batch_id, sizes.drain)
    after = env.cpu_sample()
    completed = _count_state(env, batch_id, "completed")
    elapsed = env.last_finished(batch_id) - accepted
    failures = env.conn.execute("SELECT state, error_code, count(*) FROM batch_items WHERE batch_id = %s"
                                " AND state <> 'completed' GROUP BY 1, 2", (batch_id,)).fetchall()
    env.forget_batch(batch_id)
    rate, client_ms = direct_client(env.upstream.url + "/v1/chat/completions", KEYS["fast"], items,
                                    processes * threads)
    cpu = {group: sysstat.cpu_delta(before[group], after[group]) * 1000 / sizes.drain for group in before}
    if completed != sizes.drain:
        results.notes.append(f"{scenario}: only {completed} of {sizes.drain} items completed; the others: "
                             + ", ".join(f"{n} {state} ({code})" for state, code, n in failures))
    label = f"{sizes.drain:,} items, {processes}x{threads} threads"
    results.add(scenario, f"{label}: items/s", sizes.drain / elapsed, "items/s",
                baseline=rate, baseline_name="plain client → upstream")
    results.add(scenario, f"{label}: items/s ÷ plain client", sizes.drain / elapsed / rate, "x",
                target=(">=", DRAIN_OVER_CLIENT) if real else None)
    results.add(scenario, f"{label}: CPU per item, all processes", sum(cpu.values()), "ms",
                baseline=client_ms, baseline_name="plain client's CPU")
    results.add(scenario, f"{label}: CPU per item, all processes ÷ plain client",
                sum(cpu.values()) / client_ms, "x", target=("<=", CPU_OVER_CLIENT) if real else None)
    for group, ms in cpu.items():
        results.add(scenario, f"{label}: CPU per item, {group}", ms, "ms",
                    target=("<=", POSTGRES_MS) if group == "postgres" and real else None)


MODELS = {"threads": (), "gevent": ("--gevent",)}  # `relay worker` concurrency models compared by slow_drain


def slow_drain(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Drain with a slow upstream and high worker concurrency, on OS threads and on gevent: wall time against
    items x latency ÷ concurrency."""
    threads = sizes.slow_concurrency // 2
    body, _ = batch_body(sizes.slow_items)
    latency = sizes.slow_latency_ms / 1000
    ideal = sizes.slow_items * latency / sizes.slow_concurrency
    for model, extra in MODELS.items():
        env.start_workers(2, threads, extra)
        label = f"{sizes.slow_items:,} items, {sizes.slow_latency_ms} ms upstream, 2x{threads} {model}"
        for _ in range(repeat):
            batch_id, _ = env.post_batch("real-slow", body)
            accepted = time.time()
            env.wait_final(batch_id, sizes.slow_items)
            elapsed = env.last_finished(batch_id) - accepted
            completed = _count_state(env, batch_id, "completed")
            env.forget_batch(batch_id)
            if completed != sizes.slow_items:
                results.notes.append(f"slow drain ({model}): only {completed} of {sizes.slow_items} completed")
            results.add("slow drain", f"{label}: wall time ÷ ideal", elapsed / ideal, "x",
                        target=("<=", SLOW_OVER_IDEAL), baseline=1.0, baseline_name=f"ideal {ideal:.1f} s")
            results.add("slow drain", f"{label}: items/s", sizes.slow_items / elapsed, "items/s")


def rate_limited(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """A policy of RATE_LIMIT requests per window: items completed in the first (aligned) window vs the limit.

    Windows are fixed and epoch-aligned, so each run starts just after a window boundary: the first window is
    then a whole window, and completions are counted per window by the claim time of their usage event."""
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    body, _ = batch_body(sizes.limited_items)
    window = sizes.rate_window_s
    for _ in range(repeat):
        time.sleep(window - time.time() % window + 0.2)
        batch_id, _ = env.post_batch("limited", body)
        env.wait_final(batch_id, sizes.limited_items)
        per_window = env.conn.execute(
            "SELECT floor(extract(epoch FROM started_at) / %s) AS w, count(*) FILTER (WHERE status = 200)"
            " FROM usage_events WHERE batch_id = %s GROUP BY w ORDER BY w", (window, batch_id)).fetchall()
        admitted = env.conn.execute(  # what the leases granted in this policy's windows (other policies have their own)
            "SELECT coalesce(max(w.requests), 0) FROM rate_limit_windows w"
            " JOIN policy_rate_limits l ON l.id = w.limit_id JOIN policies p ON p.id = l.policy_id"
            " WHERE p.name = 'limited' AND p.deleted_at IS NULL").fetchone()
        env.forget_batch(batch_id)
        first = int(per_window[0][1]) if per_window else 0
        most = max(int(r[1]) for r in per_window) if per_window else 0
        label = f"{sizes.rate_limit:,}/{window}s, {sizes.limited_items:,} items"
        results.add("rate-limited", f"{label}: completed in the first window ÷ limit", first / sizes.rate_limit,
                    "x", target=(">=", 0.98))
        results.add("rate-limited", f"{label}: most completed in any window ÷ limit", most / sizes.rate_limit,
                    "x", target=("<=", 1.0))
        results.add("rate-limited", f"{label}: most admitted in any window ÷ limit",
                    int(admitted[0] if admitted else 0) / sizes.rate_limit, "x", target=("<=", 1.0))
    shared_limit(env, sizes, repeat, results)


SHARED_CLIENTS = 16  # live keep-alive clients beside the batch in shared_limit


def shared_limit(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Live calls from SHARED_CLIENTS keep-alive clients (a refused one goes on from a new connection, which
    another API process may accept) and a batch at once, on the same policy: the API's processes and the
    workers' share its limit by leases. Per (aligned) window, admissions ÷ limit: at most 1, and filled. On the
    workers rate_limited started."""
    body, _ = batch_body(sizes.limited_items)
    key, window = env.keys["limited"], sizes.rate_window_s
    call = live.chat_body("shared limit")
    for _ in range(repeat):
        time.sleep(window - time.time() % window + 0.2)
        started = math.floor(time.time() / window) * window
        batch_id, _ = env.post_batch("limited", body)
        stop = threading.Event()
        threading.Timer(started + window - time.time(), stop.set).start()  # the window's end
        clients = [threading.Thread(target=_hammer, args=(f"{env.api_url}/v1/chat/completions", key, call, stop))
                   for _ in range(SHARED_CLIENTS)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        env.http.post(f"{env.api_url}/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"},
                      timeout=60)
        admitted = env.conn.execute(  # every call and item that passed the limit (not refused) in the window
            "SELECT count(*) FROM usage_events_full e JOIN policies p ON p.id = e.policy_id"
            " WHERE p.name = 'limited' AND p.deleted_at IS NULL AND e.started_at >= to_timestamp(%s)"
            " AND e.started_at < to_timestamp(%s) AND coalesce(e.error_code, '') <> 'rate_limited'",
            (started, started + window)).fetchone()
        env.wait_final(batch_id, sizes.limited_items)
        env.forget_batch(batch_id)
        label = f"{sizes.rate_limit:,}/{window}s, live calls and a batch"
        results.add("rate-limited", f"{label}: admitted in the window ÷ limit", int(admitted[0]) / sizes.rate_limit,
                    "x", target=(">=", 0.98))


def _hammer(url: str, key: str, body: bytes, stop: threading.Event) -> None:
    """Calls on one keep-alive connection until STOP; a refused call's client goes on from a new connection."""
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    session = requests.Session()
    try:
        while not stop.is_set():
            if session.post(url, data=body, headers=headers, timeout=60).status_code == 429:
                session.close()
                session = requests.Session()
    finally:
        session.close()


def cancel(env: BenchEnv, sizes: Sizes, repeat: int, results: Results, extra: tuple[str, ...] = ()) -> None:
    """CANCEL_ITEMS items in flight on two worker processes (upstream never answers in time): time from the
    cancel's 200 until none of them is running."""
    env.start_workers(2, math.ceil(sizes.cancel_items / 2), extra)
    body, _ = batch_body(sizes.cancel_items)
    for _ in range(repeat):
        batch_id, _ = env.post_batch("hang", body)
        _wait_running(env, batch_id, sizes.cancel_items)
        res = env.http.post(f"{env.api_url}/v1/batches/{batch_id}/cancel", timeout=60,
                            headers={"Authorization": f"Bearer {env.keys['hang']}"})
        answered = time.perf_counter()
        if res.status_code != 200:
            raise RuntimeError(f"cancel answered {res.status_code}: {res.text[:300]}")
        while _count_state(env, batch_id, "running"):
            if time.perf_counter() - answered > 60:
                raise RuntimeError("cancelled items still running after 60 s")
            time.sleep(0.005)
        took = time.perf_counter() - answered
        cancelled = _count_state(env, batch_id, "cancelled")
        env.forget_batch(batch_id)
        if cancelled != sizes.cancel_items:
            results.notes.append(f"cancel: {cancelled} of {sizes.cancel_items} items ended cancelled")
        results.add("cancel", f"{sizes.cancel_items} items in flight on 2 processes: cancel's 200 → none running",
                    took, "s", target=("<=", 1.0))


def _wait_running(env: BenchEnv, batch_id: str, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while _count_state(env, batch_id, "running") < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_count_state(env, batch_id, 'running')} of {count} items running")
        time.sleep(0.05)


def _count_state(env: BenchEnv, batch_id: str, state: str) -> int:
    row = env.conn.execute("SELECT count(*) FROM batch_items WHERE batch_id = %s AND state = %s",
                           (batch_id, state)).fetchone()
    return int(row[0]) if row else 0
