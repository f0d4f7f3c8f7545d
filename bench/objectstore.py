"""The payload store on object storage against the folder: one scenario run on each backend (the API and workers
restarted with RELAY_PAYLOAD_BACKEND=s3 on a SeaweedFS of loopback), accept, drain, results streamed, and the
objects a batch run to the end leaves in the bucket."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from app.payload_s3 import S3Store
from app.payload_s3_packs import PACK_IDLE_S
from bench.env import BenchEnv, batch_body
from bench.report import Results
from bench.sizes import Sizes
from devtools.seaweedfs import SeaweedFS, start_seaweedfs

SCENARIO = "object store"
DRAIN_RATIO = 0.9  # drain on S3 ÷ drain on the folder, at least
ACCEPT_RATIO = 1.5  # accept on S3 ÷ accept on the folder, at most
RESULTS_PER_S = 100_000  # results streamed from S3, at least
MAX_OBJECTS = 200  # objects per 100,000-item batch run to the end, at most
SETTLE_MAX_S = 120.0  # the longest wait for the workers' packing to be over before the objects are counted


def object_store(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """For each of REPEAT runs, the same steps on the folder and on S3; ratios of S3 to the folder."""
    server = start_seaweedfs()
    env.env.update(server.credentials())
    try:
        for _ in range(repeat):
            measured = {backend: _run(env, sizes, server, backend) for backend in ("folder", "s3")}
            _report(sizes, measured, results)
    finally:
        for name in server.credentials():
            env.env.pop(name, None)
        env.stop_workers()
        env.start_api()
        server.close()


def _run(env: BenchEnv, sizes: Sizes, server: SeaweedFS, backend: str) -> dict[str, float]:
    overrides: dict[str, Any] = server.settings() if backend == "s3" else {}
    processes, threads = sizes.drain_workers
    env.stop_workers()
    env.start_api(**overrides)
    body, _ = batch_body(sizes.files_items)
    batch_id, accept_s = env.post_batch("fast", body)
    env.start_workers(processes, threads, **overrides)
    accepted = time.time()
    env.wait_final(batch_id, sizes.files_items)
    drain_per_s = sizes.files_items / (env.last_finished(batch_id) - accepted)
    objects = _settled_objects(server, batch_id) if backend == "s3" else 0  # results read once packed
    _stream_results(env, batch_id, sizes.files_items)  # once to warm the API workers (an S3 client's first use)
    streamed_per_s = _stream_results(env, batch_id, sizes.files_items)
    env.forget_batch(batch_id)
    if backend == "s3":
        S3Store(server.client(), server.bucket, "", env.work / "s3-staging", mode=0o600).remove_batch(UUID(batch_id))
    return {"accept_s": accept_s, "drain_per_s": drain_per_s, "results_per_s": streamed_per_s, "objects": objects}


def _stream_results(env: BenchEnv, batch_id: str, total: int) -> float:
    """Items a second of GET /v1/batches/{id}/results?format=jsonl, read to the end."""
    started = time.perf_counter()
    with env.http.get(f"{env.api_url}/v1/batches/{batch_id}/results", params={"format": "jsonl"}, stream=True,
                      timeout=600, headers={"Authorization": f"Bearer {env.keys['fast']}"}) as res:
        lines = sum(chunk.count(b"\n") for chunk in res.iter_content(1 << 20))
    took = time.perf_counter() - started
    if lines != total:
        raise RuntimeError(f"results of {batch_id}: {lines} lines of {total}")
    return total / took


def _settled_objects(server: SeaweedFS, batch_id: str) -> int:
    """The batch's objects once the workers' packing is over: the count unchanged for twice the idle time after
    which a process packs a batch (bounded: a count that never settles is reported as it is then)."""
    count, since, deadline = len(_keys(server, batch_id)), time.monotonic(), time.monotonic() + SETTLE_MAX_S
    while time.monotonic() - since < 2 * PACK_IDLE_S and time.monotonic() < deadline:
        time.sleep(0.5)
        now = len(_keys(server, batch_id))
        if now != count:
            count, since = now, time.monotonic()
    return count


def _keys(server: SeaweedFS, batch_id: str) -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=f"{batch_id}/")
    return [entry["Key"] for page in pages for entry in page.get("Contents", ())]


def _report(sizes: Sizes, measured: dict[str, dict[str, float]], results: Results) -> None:
    folder, s3 = measured["folder"], measured["s3"]
    label = f"{sizes.files_items:,} items"
    results.add(SCENARIO, f"{label}: drain on S3 ÷ drain on the folder", s3["drain_per_s"] / folder["drain_per_s"],
                "x", target=(">=", DRAIN_RATIO), baseline=folder["drain_per_s"], baseline_name="folder items/s")
    results.add(SCENARIO, f"{label}: accept on S3 ÷ accept on the folder", s3["accept_s"] / folder["accept_s"], "x",
                target=("<=", ACCEPT_RATIO), baseline=folder["accept_s"], baseline_name="folder seconds to 202")
    results.add(SCENARIO, f"{label}: results streamed from S3 (packed)", s3["results_per_s"], "items/s",
                target=(">=", RESULTS_PER_S), baseline=folder["results_per_s"], baseline_name="from the folder")
    results.add(SCENARIO, f"{label}: objects in the bucket, run to the end by {sizes.drain_workers[0]} processes",
                s3["objects"], "", target=("<=", MAX_OBJECTS * max(1, sizes.files_items // 100_000)))
