"""Fair share between owners (the dispatcher's order of work), on the `relay worker` defaults and an upstream that
answers in FAIR_LATENCY_MS:

- a FAIR_SMALL-item batch submitted FAIR_DELAY_S after another owner's FAIR_BIG-item batch: its time to finished
  against the same batch's on an idle pool (same run);
- the big batch's drain rate over FAIR_WINDOW_S with that small batch beside it, against the same big batch
  alone (same run);
- two owners' big batches submitted together: the slower one's progress over FAIR_WINDOW_S ÷ the faster one's.

The big batches are cancelled once measured, so a run takes about three windows, not three full drains."""

from __future__ import annotations

import time

from bench.env import FINAL, BenchEnv, batch_body
from bench.report import Results
from bench.sizes import Sizes

SMALL_OVER_IDLE = 3.0  # the targets
DRAIN_KEPT = 0.95
OWNERS_EVEN = 0.90


def fair_share(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    owner_a, owner_b = env.keys["fair"], env.new_key("fair")
    big, _ = batch_body(sizes.fair_big)
    small, _ = batch_body(sizes.fair_small)
    label = (f"{sizes.fair_small} items after another owner's {sizes.fair_big:,}, {sizes.fair_latency_ms} ms "
             f"upstream, {processes}x{threads} threads")
    for _ in range(repeat):
        idle = _small_batch_time(env, small, sizes.fair_small, owner_b)
        alone = _big_batch_rate(env, big, sizes, owner_a, None)
        beside = _big_batch_rate(env, big, sizes, owner_a, (small, owner_b))
        assert beside.small_s is not None
        results.add("fair share", f"{label}: time to finished", beside.small_s, "s",
                    baseline=idle, baseline_name="the same batch on an idle pool")
        results.add("fair share", f"{label}: time to finished ÷ idle pool", beside.small_s / idle, "x",
                    target=("<=", SMALL_OVER_IDLE))
        results.add("fair share", f"{sizes.fair_big:,}-item batch: drain rate with the small batch beside it",
                    beside.rate, "items/s", baseline=alone.rate, baseline_name="the same batch alone")
        results.add("fair share", f"{sizes.fair_big:,}-item batch: drain rate beside ÷ alone",
                    beside.rate / alone.rate if alone.rate else 0.0, "x", target=(">=", DRAIN_KEPT))
        first, second = _two_owners(env, big, sizes, owner_a, owner_b)
        results.add("fair share", f"two owners' {sizes.fair_big:,}-item batches, equal weights: slower ÷ faster "
                    f"progress over {sizes.fair_window_s:.0f} s", min(first, second) / max(first, second, 1), "x",
                    target=(">=", OWNERS_EVEN))


class _Run:
    def __init__(self, rate: float, small_s: float | None) -> None:
        self.rate, self.small_s = rate, small_s


def _small_batch_time(env: BenchEnv, body: bytes, count: int, key: str) -> float:
    """Seconds from posting BODY until its last item is final."""
    started = time.time()
    batch_id, _ = env.post_batch("fair", body, key)
    env.wait_final(batch_id, count, poll=0.02)
    took = env.last_finished(batch_id) - started
    env.forget_batch(batch_id)
    return took


def _big_batch_rate(env: BenchEnv, body: bytes, sizes: Sizes, key: str, small: tuple[bytes, str] | None) -> _Run:
    """Post the big batch; FAIR_DELAY_S after its 202, the SMALL batch (body, key) if given; the big batch's items
    final per second over the FAIR_WINDOW_S that follow, and the small batch's time to finished."""
    batch_id, _ = env.post_batch("fair", body, key)
    time.sleep(sizes.fair_delay_s)
    start = time.time()
    small_s = _small_batch_time(env, small[0], sizes.fair_small, small[1]) if small else None
    time.sleep(max(0.0, start + sizes.fair_window_s - time.time()))
    done = _final_between(env, batch_id, start, start + sizes.fair_window_s)
    _cancel(env, batch_id, key, sizes.fair_big)
    return _Run(done / sizes.fair_window_s, small_s)


def _two_owners(env: BenchEnv, body: bytes, sizes: Sizes, key_a: str, key_b: str) -> tuple[int, int]:
    """Both owners post a big batch; the items each completes in the FAIR_WINDOW_S after both are accepted (plus
    FAIR_DELAY_S for the pool to settle)."""
    batch_a, _ = env.post_batch("fair", body, key_a)
    batch_b, _ = env.post_batch("fair", body, key_b)
    time.sleep(sizes.fair_delay_s)
    start = time.time()
    time.sleep(sizes.fair_window_s)
    counts = [_final_between(env, b, start, start + sizes.fair_window_s) for b in (batch_a, batch_b)]
    _cancel(env, batch_a, key_a, sizes.fair_big)
    _cancel(env, batch_b, key_b, sizes.fair_big)
    return counts[0], counts[1]


def _final_between(env: BenchEnv, batch_id: str, start: float, end: float) -> int:
    row = env.conn.execute(
        "SELECT count(*) FROM batch_items WHERE batch_id = %s AND state = ANY(%s)"
        " AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)",
        (batch_id, list(FINAL), start, end)).fetchone()
    return int(row[0]) if row else 0


def _cancel(env: BenchEnv, batch_id: str, key: str, total: int) -> None:
    """Cancel a measured batch (a batch already finished answers 409), wait until every item is final, and forget
    it; the messages of its cancelled items are skipped by the workers."""
    res = env.http.post(f"{env.api_url}/v1/batches/{batch_id}/cancel", timeout=60,
                        headers={"Authorization": f"Bearer {key}"})
    if res.status_code not in (200, 409):
        raise RuntimeError(f"cancel answered {res.status_code}: {res.text[:300]}")
    env.wait_final(batch_id, total, timeout=120)
    env.forget_batch(batch_id)
