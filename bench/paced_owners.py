"""Two owners on one paced policy (issue #39): owner X's batch runs alone for a few seconds, then owner Y submits
one; while both wait, every WINDOW_S the slower owner's items started ÷ its fair share (half of what both started
in that window; equal weights on one policy). Reported: the lowest of those windows (target >= 0.9)."""

from __future__ import annotations

import time

from bench.env import BenchEnv, batch_body
from bench.report import Results
from bench.sizes import Sizes

WINDOW_S = 2.0
FAIR_TARGET = 0.9


def paced_owners(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    env.start_workers(*sizes.drain_workers)
    rate = sizes.paced_share * sizes.paced_limit / sizes.paced_window_s  # batch items a second
    x_seconds, y_seconds, head_start_s = sizes.paced_owners_s  # batch sizes in seconds of the policy's paced rate
    x_items, y_items = int(rate * x_seconds), int(rate * y_seconds)
    y_key = env.new_key("paced")
    label = f"two owners on one paced policy ({rate:g} items/s): slower owner's progress ÷ its fair share"
    try:
        for _ in range(repeat):
            x, _ = env.post_batch("paced", batch_body(x_items)[0])
            time.sleep(head_start_s)
            y, _ = env.post_batch("paced", batch_body(y_items)[0], key=y_key)
            worst = min(_ratios(env, x, y, y_items))
            results.add("fair share", f"{label}, worst {WINDOW_S:g} s window", worst, "x",
                        target=(">=", FAIR_TARGET))
            for batch_id in (x, y):
                env.http.post(f"{env.api_url}/v1/batches/{batch_id}/cancel", timeout=30, headers={
                    "Authorization": f"Bearer {y_key if batch_id == y else env.keys['paced']}"})
            for batch_id, total in ((x, x_items), (y, y_items)):
                env.wait_final(batch_id, total, timeout=120)
                env.forget_batch(batch_id)
    finally:
        env.stop_workers()


def _ratios(env: BenchEnv, x: str, y: str, y_items: int) -> list[float]:
    """Per WINDOW_S while Y has items waiting: min(X's, Y's items started) ÷ half of both."""
    ratios: list[float] = []
    before = (_started(env, x), _started(env, y))
    while before[1] < y_items:
        time.sleep(WINDOW_S)
        now = (_started(env, x), _started(env, y))
        moved = (now[0] - before[0], now[1] - before[1])
        if now[1] < y_items and sum(moved):  # a whole window with both waiting
            ratios.append(min(moved) / (sum(moved) / 2))
        before = now
    return ratios or [0.0]


def _started(env: BenchEnv, batch_id: str) -> int:
    row = env.conn.execute("SELECT coalesce(sum(completed + discarded + cancelled + running), 0) FROM batch_progress"
                           " WHERE batch_id = %s", (batch_id,)).fetchone()
    return int(row[0]) if row else 0
