"""The payload store at scale: how many files a large batch run to the end leaves behind, and the CPU the store
spends per item on a worker's path (read the request, append the response, sync per group)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from app.payloads import FolderStore
from bench.env import BenchEnv, batch_body
from bench.reads import RESPONSE
from bench.report import Results
from bench.sizes import Sizes

MAX_EXTRA_FILES = 10  # the target: at most this many files and folders per batch, plus one per worker process
SYNC_GROUP = 16  # items whose responses one sync() covers in the CPU figure (the engine syncs per group)


def files(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """A FILES_ITEMS batch run to the end by `relay worker -p 2 -t 16`: files and folders created for it (once:
    the count does not vary between runs); then the payload store's CPU per item, REPEAT times."""
    processes, threads = sizes.drain_workers
    env.start_workers(processes, threads)
    body, items = batch_body(sizes.files_items)
    batch_id, _ = env.post_batch("fast", body)
    env.wait_final(batch_id, sizes.files_items)
    folder = env.work / "payloads" / batch_id
    created = sorted(str(p.relative_to(folder.parent)) for p in [folder, *folder.rglob("*")])
    env.forget_batch(batch_id)
    label = f"{sizes.files_items:,}-item batch run to the end by {processes} worker processes"
    results.notes.append(f"files: {label} created {len(created)} files and folders: {', '.join(created)}")
    results.add("files", f"{label}: files and folders created", len(created), "",
                target=("<=", MAX_EXTRA_FILES + processes))
    for _ in range(repeat):
        results.add("files", f"payload store CPU per item (read request, append response, sync per {SYNC_GROUP})",
                    payload_cpu_ms(env.work, items), "ms", target=("<=", 0.1))


def payload_cpu_ms(work: Path, bodies: list[bytes]) -> float:
    """CPU milliseconds per item this process spends reading each request and appending and syncing a response."""
    store = FolderStore(work / f"payload-cpu-{uuid.uuid4().hex}")
    batch = uuid.uuid4()
    store.write_requests(batch, bodies)
    before = os.times()
    for idx in range(len(bodies)):
        store.read_request(batch, idx)
        store.append_response(batch, idx, RESPONSE)
        if idx % SYNC_GROUP == SYNC_GROUP - 1:
            store.sync()
    store.sync()
    after = os.times()
    store.close()
    shutil.rmtree(store.root, ignore_errors=True)
    cpu = after.user + after.system - before.user - before.system
    return cpu * 1000 / len(bodies)
