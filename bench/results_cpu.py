"""The results stream measured in one process, without HTTP: a batch of ITEMS completed items made directly (rows
COPYed, responses written through the payload store), then its JSON Lines results and its OpenAI output file read
to the end, each a few times, reported in items per second of wall time and per second of this process's CPU (the
figure a loaded machine does not change).

    .venv/bin/python -m bench.results_cpu --database t_results_cpu [--items 100000] [--s3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from app.batches import results, store
from app.compat.provider import joined
from app.compat.views import openai_result_line
from app.payload_backends import payload_store
from app.runtime import Runtime
from app.settings import Settings
from devtools.seaweedfs import start_seaweedfs
from devtools.services import fresh_services

SYNC_EVERY = 5000  # responses per sync (one segment, or one object on S3, per sync)
RESPONSE = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello " * 8}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}}).encode()


def make_batch(runtime: Runtime, items: int) -> uuid.UUID:
    """A batch of ITEMS completed items whose responses are RESPONSE, kept by this process's payload store."""
    batch_id, payloads = uuid.uuid4(), payload_store(runtime)
    with runtime.pool.connection() as conn:
        store.insert_batch(conn, {"id": batch_id, "shape": "openai", "total": items, "owner": "bench",
                                  "policy_id": uuid.uuid4(), "credential_kind": "key", "credential_id": uuid.uuid4()})
        store.copy_items(conn, batch_id, ("gpt-4o-mini" for _ in range(items)))
    payloads.write_requests(batch_id, (b"{}" for _ in range(items)))
    refs = []
    for idx in range(items):
        refs.append((idx, *payloads.append_response(batch_id, idx, RESPONSE)))
        if idx % SYNC_EVERY == SYNC_EVERY - 1:
            payloads.sync()
    payloads.sync()
    with runtime.pool.connection() as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE refs (idx int, segment text, offset_ bigint, length int)")
        with cur.copy("COPY refs FROM STDIN") as copy:
            for row in refs:
                copy.write_row(row)
        cur.execute("UPDATE batch_items i SET state = 'completed', response_segment = r.segment,"
                    " response_offset = r.offset_, response_length = r.length FROM refs r"
                    " WHERE i.batch_id = %s AND i.idx = r.idx", (batch_id,))
    return batch_id


def timed(read: Callable[[], Iterable[bytes]], items: int) -> tuple[float, float]:
    """Items a second of wall time and of this process's CPU time, READ's chunks read to the end."""
    wall, cpu = time.perf_counter(), time.process_time()
    size = sum(len(chunk) for chunk in read())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if size < items * len(RESPONSE):
        raise RuntimeError(f"{size} bytes for {items} items")
    return items / wall, items / cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", required=True, help="its own database and vhost (dropped and made again)")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="on a SeaweedFS started on loopback, not a folder")
    args = parser.parse_args(argv)
    services = fresh_services(args.database)
    server = start_seaweedfs() if args.s3 else None
    extra: dict[str, Any] = {}
    if server is not None:
        os.environ.update(server.credentials())
        extra = server.settings()
    with tempfile.TemporaryDirectory() as folder:
        runtime = Runtime.build(Settings(database_url=services.database_url, broker_url=services.broker_url,
                                         admin_token="bench-" + "a" * 32, secret_key="bench-" + "s" * 32,
                                         batch_payload_dir=folder, **extra))
        try:
            batch_id = make_batch(runtime, args.items)
            streams = {"relay jsonl": lambda: results.open_results(runtime, None, str(batch_id), jsonl=True),
                       "openai output": lambda: joined(openai_result_line(batch_id, item) for item in
                                                       results.result_items(runtime, None, batch_id))}
            for name, read in streams.items():
                for _ in range(args.rounds):
                    wall, cpu = timed(read, args.items)
                    print(f"{name}: {wall:,.0f} items/s of wall time, {cpu:,.0f} items/s of CPU", flush=True)
        finally:
            runtime.close()
            if server is not None:
                server.close()


if __name__ == "__main__":
    main()
