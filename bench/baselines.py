"""Baselines measured in the bench process, in the same run as the figure they are compared with."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import requests


def bare_accept(body: bytes, work: Path) -> float:
    """Seconds for the bare cost of accepting a batch: json.loads of the body, one write of the same bytes to one
    file, and one sync of that file."""
    path = work / f"baseline-{uuid.uuid4().hex}"
    started = time.perf_counter()
    json.loads(body)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        os.fdatasync(fd)
    finally:
        os.close(fd)
    took = time.perf_counter() - started
    path.unlink()
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


def read_results_bare(conn: psycopg.Connection[Any], batch_id: str, folder: Path) -> float:
    """Items/s of the bare work behind the results stream: one SELECT of every item's (idx, state, error, response
    ref) and one read of each segment file the refs point into."""
    started = time.perf_counter()
    rows = conn.execute("SELECT idx, state, error, response_segment, response_offset, response_length"
                        " FROM batch_items WHERE batch_id = %s ORDER BY idx", (batch_id,)).fetchall()
    for segment in {row[3] for row in rows if row[3] is not None}:
        (folder / segment).read_bytes()
    return len(rows) / (time.perf_counter() - started)


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system
