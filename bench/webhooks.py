"""Webhooks: many batches ending at once, each with a callback_url on a receiver process; the time from each batch's
last item becoming final to its webhook arriving at the receiver (p50, p99); and another owner's batch beside
deliveries to a receiver that hangs, against alone (hungwebhooks)."""

from __future__ import annotations

import base64
import json
import secrets
import statistics
import time

from bench.env import KEYS, BenchEnv, item_body
from bench.report import Results
from bench.sizes import Sizes
from devtools.webhook_receiver import Receiver

P50_TARGET_S, P99_TARGET_S = 1.0, 3.0
ALLOWED = {"webhook_allowed_hosts": "127.0.0.1", "webhook_allowed_networks": "127.0.0.0/8"}


def webhooks(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """SIZES.webhook_batches batches of SIZES.webhook_items items, submitted while no worker runs, then drained
    together: they all end within a moment of each other. Latency is the receiver's arrival time minus the batch's
    last item's finished_at (both clocks of this machine)."""
    receiver = Receiver(log_path=env.work / "receiver.log").start()
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    env.start_api(**ALLOWED)
    try:
        for run in range(repeat):
            env.stop_workers()
            receiver.reset()
            ids = [_submit(env, receiver, secret, sizes.webhook_items, f"{run}-{n}")
                   for n in range(sizes.webhook_batches)]
            env.start_workers(*sizes.drain_workers, **ALLOWED)
            arrived = _arrivals(receiver, ids, timeout=120)
            latencies = sorted(arrived[batch_id] - env.last_finished(batch_id) for batch_id in ids)
            label = f"{sizes.webhook_batches} batches ending at once"
            results.add("webhooks", f"{label}: last item final → webhook received, p50",
                        statistics.median(latencies), "s", target=("<=", P50_TARGET_S))
            results.add("webhooks", f"{label}: last item final → webhook received, p99",
                        _percentile(latencies, 0.99), "s", target=("<=", P99_TARGET_S))
            for batch_id in ids:
                env.forget_batch(batch_id)
    finally:
        env.stop_workers()
        receiver.stop()
        env.start_api()


def _submit(env: BenchEnv, receiver: Receiver, secret: str, items: int, tag: str) -> str:
    body = json.dumps({"shape": "openai", "callback_url": f"{receiver.url}/bench/{tag}", "callback_secret": secret,
                       "requests": [item_body(i, 256) for i in range(items)]}).encode()
    batch_id, _ = env.post_batch("fast", body)
    return batch_id


def _arrivals(receiver: Receiver, ids: list[str], timeout: float) -> dict[str, float]:
    """When each batch's first webhook arrived (epoch seconds)."""
    wanted, found = set(ids), {}
    deadline = time.monotonic() + timeout
    while len(found) < len(wanted):
        for received in receiver.received("/bench/"):
            batch_id = json.loads(received.body)["data"]["id"]
            if batch_id in wanted:
                found.setdefault(batch_id, received.received_at)
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(found)} of {len(wanted)} webhooks arrived after {timeout:.0f}s")
        time.sleep(0.1)
    return found


def _percentile(values: list[float], q: float) -> float:
    """The Q quantile of sorted VALUES (nearest rank)."""
    return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]


HUNG_BATCHES, OTHER_ITEMS, OTHER_LATENCY_MS = 64, 200, 100
HUNG_TARGET = 1.2  # another owner's batch beside hung deliveries ÷ alone


def hung_receiver(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Another owner's batch (OTHER_ITEMS items, a 100 ms upstream) alone, then beside HUNG_BATCHES one-item
    batches whose callback_url accepts connections and never answers: its drain time beside them ÷ alone."""
    receiver = Receiver(log_path=env.work / "receiver.log").start()
    receiver.behave("/hung", delay_s=600)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    env.upstream.control(KEYS["fair"], latency_ms=OTHER_LATENCY_MS)
    env.start_api(**ALLOWED)
    try:
        env.start_workers(*sizes.drain_workers, **ALLOWED)
        for _ in range(repeat):
            alone = _other_batch(env)
            for n in range(HUNG_BATCHES):
                body = json.dumps({"shape": "openai", "callback_url": f"{receiver.url}/hung/{n}",
                                   "callback_secret": secret, "requests": [item_body(0, 256)]}).encode()
                env.post_batch("fast", body)
            receiver.wait("/hung", count=2, timeout=120)  # deliveries to it are hanging now
            beside = _other_batch(env)
            results.add("webhooks", f"another owner's {OTHER_ITEMS} items ({OTHER_LATENCY_MS} ms upstream) beside "
                        f"{HUNG_BATCHES} hung deliveries ÷ alone", beside / alone, "x", target=("<=", HUNG_TARGET))
    finally:
        env.stop_workers()
        receiver.stop()
        env.upstream.control(KEYS["fair"], latency_ms=sizes.fair_latency_ms)
        env.start_api()


def _other_batch(env: BenchEnv) -> float:
    """Seconds from the submit of the other owner's batch until every item of it is final."""
    started = time.monotonic()
    batch_id, _ = env.post_batch("fair", json.dumps({"shape": "openai", "requests": [
        item_body(i, 256) for i in range(OTHER_ITEMS)]}).encode())
    env.wait_final(batch_id, OTHER_ITEMS, timeout=300, poll=0.05)
    took = time.monotonic() - started
    env.forget_batch(batch_id)
    return took
