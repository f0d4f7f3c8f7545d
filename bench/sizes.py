"""How big each scenario runs: the issue's sizes, a --quick set, and a tiny set for the smoke test."""

from __future__ import annotations

from dataclasses import dataclass

from app.settings import Settings

# What `relay worker` starts with no flags (scripts/dev.sh up, the README's processes): the drain scenarios run it.
RELAY_WORKER_DEFAULTS = (Settings.worker_processes, Settings.worker_threads)


@dataclass(frozen=True)
class Sizes:
    accept: tuple[int, ...] = (10_000, 100_000)
    drain: int = 20_000
    drain_workers: tuple[int, int] = RELAY_WORKER_DEFAULTS  # processes, threads
    slow_items: int = 5_000
    slow_concurrency: int = 500  # over two worker processes
    slow_latency_ms: int = 1_000
    limited_items: int = 10_000
    rate_limit: int = 6_000  # requests per window
    rate_window_s: int = 60
    reads_items: int = 100_000
    read_gets: int = 50
    live_requests: int = 1_000
    live_clients: int = 32
    cancel_items: int = 200  # in flight on two worker processes
    files_items: int = 100_000  # run to the end to count the files the payload store created
    slow_clients: int = 500  # connections held open by slow clients
    slow_probes: int = 200  # /healthz and live calls made meanwhile
    slow_wait_s: float = 60.0  # how long partial requests may take to be dropped (deadlines 15 s and 30 s)
    api_deadlines: tuple[int, float] | None = None  # (header, I/O) deadlines of the API; None: the defaults
    fair_big: int = 20_000  # fair share: one owner's big batch ...
    fair_small: int = 5  # ... and another's small one, submitted FAIR_DELAY_S later
    fair_delay_s: float = 2.0
    fair_latency_ms: int = 300
    fair_window_s: float = 30.0  # how long the big batches' progress is measured (then they are cancelled)
    paced_items: int = 20_000  # pacing: a paced batch of this many items ...
    paced_limit: int = 6_000  # ... under this many requests per PACED_WINDOW_S, of which PACED_SHARE for batches
    paced_window_s: int = 60
    paced_share: float = 0.8
    paced_live_per_min: int = 1_000  # live calls of the same policy meanwhile
    paced_live_baseline_s: float = 30.0  # the same live calls without the batch, for the baseline
    paced_live_items: int = 3_000  # pacedlive: a paced batch of this many items on the paced policy ...
    paced_live_latency_ms: int = 100  # ... its upstream answering in this long ...
    paced_live_every_s: float = 0.2  # ... and a live call of the policy this often, alone then beside it
    paced_owners_s: tuple[float, float, float] = (40, 12, 3.0)  # pacedowners: X's and Y's batches in seconds of the
    # paced rate, and X's head start (s)
    rps_items: int = 3_000  # a batch on a key that answers 429 past RPS_KEY_LIMIT calls a second
    rps_key_limit: int = 50
    webhook_batches: int = 100  # batches ending at once, each with a callback_url ...
    webhook_items: int = 5  # ... of this many items
    soak_batches: int = 10  # the soak: this many batches (the first half purged before the second) ...
    soak_items: int = 100_000  # ... of this many items ...
    soak_latency_ms: int = 20  # ... on an upstream answering in this long
    soak_vacuum_wait_s: float = 180.0  # how long the soak waits for autovacuum after the purge


FULL = Sizes()
QUICK = Sizes(accept=(2_000, 10_000), drain=4_000, slow_items=1_000, slow_concurrency=200, limited_items=1_500,
              rate_limit=1_000, rate_window_s=20, reads_items=10_000, read_gets=30, live_requests=300,
              cancel_items=100, slow_probes=50, files_items=10_000, fair_big=4_000, fair_window_s=15.0,
              paced_items=2_000, paced_limit=1_500, paced_window_s=20, paced_live_per_min=600,
              paced_live_baseline_s=10.0, rps_items=1_000, soak_batches=2, soak_items=20_000)
TINY = Sizes(accept=(40,), drain=60, drain_workers=(1, 4), slow_items=20, slow_concurrency=10, slow_latency_ms=200,
             limited_items=30, rate_limit=20, rate_window_s=2, reads_items=50, read_gets=5, live_requests=20,
             live_clients=4, cancel_items=6, slow_clients=20, slow_probes=5, slow_wait_s=15.0,
             api_deadlines=(1, 1.0), files_items=40, fair_big=60, fair_small=2, fair_delay_s=0.5, fair_latency_ms=100,
             fair_window_s=1.0, paced_items=40, paced_limit=50, paced_window_s=2, paced_live_per_min=120,
             paced_live_baseline_s=1.0, paced_live_items=40, rps_items=40, rps_key_limit=20, webhook_batches=5,
             webhook_items=2, paced_owners_s=(12, 3, 1.0), soak_batches=2, soak_items=40, soak_latency_ms=5,
             soak_vacuum_wait_s=0.0)
