"""How big each scenario runs: the issue's sizes, a --quick set, and a tiny set for the smoke test."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    accept: tuple[int, ...] = (10_000, 100_000)
    drain: int = 20_000
    drain_workers: tuple[int, int] = (2, 16)  # processes, threads (the `relay worker` defaults)
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


FULL = Sizes()
QUICK = Sizes(accept=(2_000, 10_000), drain=4_000, slow_items=1_000, slow_concurrency=200, limited_items=1_500,
              rate_limit=1_000, rate_window_s=20, reads_items=10_000, read_gets=30, live_requests=300,
              cancel_items=100, files_items=10_000)
TINY = Sizes(accept=(40,), drain=60, drain_workers=(1, 4), slow_items=20, slow_concurrency=10, slow_latency_ms=200,
             limited_items=30, rate_limit=20, rate_window_s=2, reads_items=50, read_gets=5, live_requests=20,
             live_clients=4, cancel_items=6, files_items=40)
