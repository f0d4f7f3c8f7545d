"""Reads on a large finished batch: GET /v1/batches/{id} latency (of a Relay batch, and of an OpenAI-compatible one)
and streaming every result, with the API's memory watched."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import requests

from bench import sysstat
from bench.baselines import read_results_bare
from bench.env import BenchEnv, batch_body
from bench.report import Results
from bench.sizes import Sizes

RESPONSE = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "finish_reason": "length",
                                    "message": {"role": "assistant", "content": "item 0: lorem ipsum " * 3}}],
                       "usage": {"prompt_tokens": 250, "completion_tokens": 16, "total_tokens": 266}}).encode()


def reads(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """A finished READS_ITEMS batch: p50 of GET /v1/batches/{id}, and results streamed in items/s."""
    env.stop_workers()
    batch_id = _finished_batch(env, sizes.reads_items)
    headers = {"Authorization": f"Bearer {env.keys['fast']}"}
    label = f"{sizes.reads_items:,}-item batch"
    with requests.Session() as session:
        for _ in range(repeat):
            _get_p50(env, session, batch_id, headers, sizes.read_gets, label, results)
            rate, streamed, growth = _stream_results(env, session, batch_id, headers,
                                                     f"/v1/batches/{batch_id}/results")
            bare = read_results_bare(env.conn, batch_id, env.work / "payloads" / batch_id)
            results.add("reads", f"{label}: results streamed", rate, "items/s", target=(">=", 100_000),
                        baseline=bare, baseline_name="SELECT + read the segment")
            results.add("reads", f"{label}: API memory growth while streaming ÷ results size "
                                 f"({streamed / 2**20:.0f} MiB)", growth / streamed, "x", target=("<=", 0.1))
    env.forget_batch(batch_id)
    _openai_reads(env, sizes, repeat, results)


def _get_p50(env: BenchEnv, session: requests.Session, batch_id: str, headers: dict[str, str], gets: int,
             label: str, results: Results) -> None:
    """p50 of GETS polls of GET /v1/batches/{id}, against as many GET /healthz."""
    polls = [_timed(lambda: session.get(f"{env.api_url}/v1/batches/{batch_id}", headers=headers, timeout=60))
             for _ in range(gets)]
    floor = [_timed(lambda: session.get(f"{env.api_url}/healthz", timeout=60)) for _ in range(gets)]
    results.add("reads", f"{label}: GET /v1/batches/{{id}} p50", statistics.median(polls) * 1000, "ms",
                target=("<=", 50.0), baseline=statistics.median(floor) * 1000, baseline_name="GET /healthz")


def _openai_reads(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """p50 of GET /v1/batches/{id} of a finished READS_ITEMS batch created through the OpenAI-compatible API (the
    poll of an OpenAI SDK: the batch answered in OpenAI's format), and its output file streamed in items/s."""
    batch_id = _finished_batch(env, sizes.reads_items)
    _as_openai_batch(env, batch_id)
    found = env.conn.execute("SELECT id FROM files WHERE batch_id = %s AND kind = 'output'", (batch_id,)).fetchone()
    output = f"file-{found[0].hex}" if found else ""
    headers = {"Authorization": f"Bearer {env.keys['fast']}"}
    label = f"{sizes.reads_items:,}-item OpenAI batch"
    with requests.Session() as session:
        for _ in range(repeat):
            _get_p50(env, session, batch_id, headers, sizes.read_gets, label, results)
            rate, _, _ = _stream_results(env, session, batch_id, headers, f"/v1/files/{output}/content")
            bare = read_results_bare(env.conn, batch_id, env.work / "payloads" / batch_id)
            results.add("reads", f"{label}: output file streamed", rate, "items/s", target=(">=", 100_000),
                        baseline=bare, baseline_name="SELECT + read the segment")
    env.forget_batch(batch_id)


def _as_openai_batch(env: BenchEnv, batch_id: str) -> None:
    """Make BATCH_ID look created through the OpenAI Batch API (its columns, custom_ids and result files, as the
    OpenAI create records them; past OpenAI's 50,000-line input limit, so not through the API itself), its items
    counted as completed: the batch an OpenAI SDK polls, finished on the first read."""
    env.conn.execute("UPDATE batches SET api = 'openai', endpoint = '/v1/chat/completions', completion_window = '24h'"
                     " WHERE id = %s", (batch_id,))
    env.conn.execute("UPDATE batch_items SET custom_id = 'request-' || idx WHERE batch_id = %s", (batch_id,))
    env.conn.execute("INSERT INTO files (id, owner, purpose, kind, filename, batch_id) SELECT gen_random_uuid(),"
                     " owner, 'batch_output', kind, 'batch_' || replace(id::text, '-', '') || '_' || kind || '.jsonl',"
                     " id FROM batches, unnest(ARRAY['output', 'error']) AS kind WHERE id = %s", (batch_id,))
    env.conn.execute("INSERT INTO batch_progress (batch_id, counter, completed) SELECT id, 'bench', total FROM batches"
                     " WHERE id = %s", (batch_id,))  # the counters agree with the items made completed
    env.conn.execute("VACUUM ANALYZE batch_items")


BENCH_SEGMENT = "responses-0-be7c4000-0.seg"  # named like a worker process's segment


def _finished_batch(env: BenchEnv, count: int) -> str:
    """Submit COUNT items with no worker running, then make them look drained: completed, their responses back
    to back in one segment file, each item's ref pointing into it."""
    body, _ = batch_body(count)
    batch_id, _ = env.post_batch("fast", body)
    (env.work / "payloads" / batch_id / BENCH_SEGMENT).write_bytes(RESPONSE * count)
    env.conn.execute("UPDATE batch_items SET state = 'completed', worker_id = 'bench', started_at = now(),"
                     " finished_at = now(), published_at = now(), response_segment = %s,"
                     " response_offset = idx::bigint * %s, response_length = %s WHERE batch_id = %s",
                     (BENCH_SEGMENT, len(RESPONSE), len(RESPONSE), batch_id))
    env.conn.execute("UPDATE batches SET dispatched_at = now() WHERE id = %s", (batch_id,))
    env.conn.execute("VACUUM ANALYZE batch_items")
    return batch_id


def _stream_results(env: BenchEnv, session: requests.Session, batch_id: str, headers: dict[str, str],
                    path: str) -> tuple[float, int, float]:
    """(items/s, bytes streamed, the API workers' peak memory growth in bytes) of one full download of PATH, every
    result of the batch."""
    pids = env.api_workers()
    rss = {pid: sysstat.memory_kb(pid, "VmRSS") for pid in pids}
    for pid in pids:
        sysstat.reset_peak(pid)
    started = time.perf_counter()
    size = 0
    with session.get(env.api_url + path, headers=headers, stream=True, timeout=600) as res:
        res.raise_for_status()
        for chunk in res.iter_content(chunk_size=1 << 16):
            size += len(chunk)
    elapsed = time.perf_counter() - started
    growth_kb = max(sysstat.memory_kb(pid, "VmHWM") - rss[pid] for pid in pids)
    items = env.conn.execute("SELECT total FROM batches WHERE id = %s", (batch_id,)).fetchone()
    return int(items[0]) / elapsed if items else 0.0, size, growth_kb * 1024.0


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
