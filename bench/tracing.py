"""What tracing costs: the live and drain rows on the real policy with tracing off, then on (every span sampled,
exported over OTLP/HTTP to a receiver in a process of its own, devtools/otlp_receiver.py, which decodes them all:
a collector on the same machine). Off must be within noise of the `live` and `drain` scenarios' rows."""

from __future__ import annotations

import json
import time

from bench import live
from bench.batches import drain_once
from bench.env import KEYS, BenchEnv, batch_body, item_body
from bench.report import Results
from bench.sizes import Sizes
from devtools.otlp_receiver import ReceiverProcess

EXPORT_WAIT_S = 30.0  # how long the last spans may take to arrive after the drain


def tracing(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Each run: live then drain, tracing off, then the same with tracing on; the spans received per drained item."""
    receiver = ReceiverProcess().start()
    untraced = dict(env.env)
    traced = {**untraced, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "relay-bench",
              "OTEL_TRACES_SAMPLER": "always_on"}
    body, items = batch_body(sizes.drain)
    try:
        for _ in range(repeat):
            for mode, variables in (("off", untraced), ("on", traced)):
                env.env = variables
                env.start_api()
                _measure(env, sizes, results, mode, body, items, receiver)
    finally:
        env.env = untraced
        env.stop_workers()
        env.start_api()
        receiver.stop()


def _measure(env: BenchEnv, sizes: Sizes, results: Results, mode: str, body: bytes, items: list[bytes],
             receiver: ReceiverProcess) -> None:
    env.stop_workers()
    direct = live.Target(f"{env.upstream.url}/v1/chat/completions", KEYS["fast"])
    live.measure_gateway(results, f"live, tracing {mode}",
                         live.Target(f"{env.api_url}/v1/chat/completions", env.keys["real"]), direct,
                         json.dumps(item_body(0)).encode(), sizes, live.REAL_TARGETS)
    env.start_workers(*sizes.drain_workers)
    receiver.clear()
    drain_once(env, sizes, results, "real", body, items, scenario=f"drain, tracing {mode}")
    if mode == "on":
        counts = _counts_after_drain(receiver, sizes.drain)
        if counts.get("relay.batch_item", 0) < sizes.drain:
            results.notes.append("drain, tracing on: some item spans never arrived (dropped by a full export queue)")
        results.add("drain, tracing on", "item traces received ÷ items", counts.get("relay.batch_item", 0)
                    / sizes.drain, "x")
        results.add("drain, tracing on", "spans received per item", sum(counts.values()) / sizes.drain, "spans")


def _counts_after_drain(receiver: ReceiverProcess, items: int) -> dict[str, int]:
    """The spans received by name, once every item's root arrived or EXPORT_WAIT_S passed (the workers export
    every 5 s: the SDK's default)."""
    deadline = time.monotonic() + EXPORT_WAIT_S
    while (counts := receiver.counts()).get("relay.batch_item", 0) < items and time.monotonic() < deadline:
        time.sleep(0.5)
    return counts
