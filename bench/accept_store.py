"""A batch's request file written by the folder store and by the S3 store, back to back in one process: the part of
a submit that differs between the two (the intake before it is the same code on either), timed in wall time and in
this process's CPU, the stores alternating so that a loaded machine weighs on both alike.

    .venv/bin/python -m bench.accept_store [--items 100000] [--rounds 4] [--varied]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from app.payload_port import PayloadStore
from app.payload_s3 import S3Store
from app.payloads import FolderStore
from bench.env import batch_body
from devtools.seaweedfs import start_seaweedfs

WORDS = ("please", "summarise", "the", "following", "report", "about", "quarterly", "revenue", "growth", "in",
         "europe", "and", "asia", "customer", "churn", "fell", "while", "costs", "rose", "by", "percent", "model")


def varied_bodies(count: int, seed: int = 7) -> list[bytes]:
    """COUNT ~1 KB chat requests of shuffled words and numbers: less repetitive, so less compressible, than
    bench.env's (one sentence repeated)."""
    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS) if rng.random() < 0.8 else str(rng.randrange(10 ** 6)) for _ in range(150))
        bodies.append(json.dumps({"model": "gpt-4o-mini", "max_tokens": 16, "custom_id": f"req-{i}-{rng.random()}",
                                  "messages": [{"role": "user", "content": text}]}).encode())
    return bodies


def timed(write: Callable[[], None]) -> tuple[float, float]:
    """WRITE's wall time and this process's CPU time, in seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    write()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--varied", action="store_true", help="less repetitive bodies than the bench's own")
    args = parser.parse_args(argv)
    bodies = varied_bodies(args.items) if args.varied else batch_body(args.items)[1]
    print(f"{args.items:,} bodies, {sum(map(len, bodies)) / 1e6:.1f} MB")
    server = start_seaweedfs()
    work = Path(tempfile.mkdtemp(prefix="relay-accept-store-"))
    stores: dict[str, PayloadStore] = {
        "folder": FolderStore(work / "folder"),
        "s3": S3Store(server.client(), server.bucket, "", work / "staging", mode=0o600)}
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in stores}
    try:
        for _ in range(args.rounds):
            for name, store in stores.items():
                batch_id = uuid.uuid4()
                measured[name].append(timed(lambda: store.write_requests(batch_id, bodies)))  # noqa: B023
                store.remove_batch(batch_id)
    finally:
        for store in stores.values():
            store.close()
        server.close()
    for name, runs in measured.items():
        walls = ", ".join(f"{wall:.2f}" for wall, _ in runs)
        print(f"{name}: wall s {walls} (median {statistics.median(w for w, _ in runs):.2f});"
              f" CPU s median {statistics.median(c for _, c in runs):.2f}")
    ratio = statistics.median(w for w, _ in measured["s3"]) / statistics.median(w for w, _ in measured["folder"])
    print(f"s3 ÷ folder (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
