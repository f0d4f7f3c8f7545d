"""Baselines measured in the bench process, in the same run as the figure they are compared with."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import requests

BASELINE_TABLE = "bench_copy_items"


def bare_accept(conn: psycopg.Connection[Any], body: bytes, items: list[bytes], work: Path) -> float:
    """Seconds for json.loads of the body, writing each item's bytes to its own file (+ one sync), and COPY of
    the same (batch_id, idx, model) rows into a table shaped like batch_items."""
    started = time.perf_counter()
    doc = json.loads(body)
    models = [str(item.get("model", "")) for item in doc["requests"]]
    staging = work / f"baseline-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    for idx, data in enumerate(items):
        fd = os.open(staging / f"{idx}.request.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
    os.sync()
    batch_id = uuid.uuid4()
    conn.execute(f"CREATE TABLE IF NOT EXISTS {BASELINE_TABLE} (LIKE batch_items INCLUDING ALL)")
    with conn.transaction(), conn.cursor().copy(f"COPY {BASELINE_TABLE} (batch_id, idx, model) FROM STDIN") as copy:
        copy.write("".join(f"{batch_id}\t{idx}\t{model}\n" for idx, model in enumerate(models)))
    took = time.perf_counter() - started
    conn.execute(f"TRUNCATE {BASELINE_TABLE}")
    shutil.rmtree(staging, ignore_errors=True)
    return took


def direct_client(url: str, key: str, bodies: list[bytes], concurrency: int) -> tuple[float, float]:
    """Send every body straight to the upstream from CONCURRENCY keep-alive threads; (items/s, client CPU ms per
    item)."""
    lock = threading.Lock()
    todo = list(reversed(bodies))
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}

    def work() -> None:
        with requests.Session() as session:
            while True:
                with lock:
                    if not todo:
                        return
                    body = todo.pop()
                res = session.post(url, data=body, headers=headers, timeout=60)
                res.raise_for_status()

    threads = [threading.Thread(target=work) for _ in range(concurrency)]
    cpu0, started = _process_cpu(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - started, _process_cpu() - cpu0
    return len(bodies) / elapsed, cpu * 1000 / len(bodies)


def read_results_bare(conn: psycopg.Connection[Any], batch_id: str, payload_dir: Path) -> float:
    """Items/s of the bare work behind the results stream: one SELECT of (idx, state, error) and every response
    file read."""
    started = time.perf_counter()
    rows = conn.execute("SELECT idx, state, error FROM batch_items WHERE batch_id = %s ORDER BY idx",
                        (batch_id,)).fetchall()
    folder = payload_dir / batch_id
    for row in rows:
        with open(folder / f"{row[0]}.response.json", "rb") as f:
            f.read()
    return len(rows) / (time.perf_counter() - started)


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system
