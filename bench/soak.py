"""The soak: SOAK_BATCHES batches of SOAK_ITEMS items through `relay worker`'s default settings, the upstream
answering in SOAK_LATENCY_MS: items/s per tenth of the run, the API's and the workers' RSS over time, Postgres's
bytes per retained item (tables, indexes, TOAST; the cluster's WAL), then the retention an operator runs with the
same window for batches and usage (`relay batches purge` of the first half, `relay usage purge` of its usage
events, folded into hourly sums) and what the second half grows the database by (does it reuse the space the
purges freed?).

Sized by `python -m bench --only soak --soak 10x100000` (the issue's million); `--soak 2x20000` fits a busy machine.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from bench import sysstat
from bench.env import KEYS, BenchEnv, batch_body
from bench.pgsize import TableSize, growth, index_sizes, report, table_sizes, wal_bytes, wal_lsn
from bench.report import Results
from bench.sizes import Sizes
from devtools.processes import RELAY, ROOT

SAMPLE_S = 0.5
# What the purges delete rows from (usage events are folded into usage_rollups' hourly sums)
PURGED_TABLES = ("batch_items", "batches", "batch_progress", "batch_usage", "usage_events", "usage_batch_shared")
VACUUMED = ("batch_items", "usage_events")  # the two large ones: their space is reused once autovacuum visits


@dataclass(frozen=True)
class Sample:
    """Seconds of draining so far (the purge's pause left out), items final so far, RSS of the API and workers."""

    drained_s: float
    done: int
    api_kb: int
    workers_kb: int


def soak(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    """Once whatever REPEAT says (a soak is one long run): the first half, sizes, purge, the second half."""
    env.upstream.control(KEYS["soak"], latency_ms=sizes.soak_latency_ms)
    processes, threads = sizes.drain_workers  # `relay worker`'s defaults
    env.start_workers(processes, threads)
    body, _ = batch_body(sizes.soak_items)
    half = max(1, sizes.soak_batches // 2)
    samples: list[Sample] = []
    start, lsn = table_sizes(env.conn), wal_lsn(env.conn)
    first = _drain(env, sizes, body, half, samples)
    middle, wal = table_sizes(env.conn), wal_bytes(env.conn, lsn)
    retained = half * sizes.soak_items
    _record_sizes(env, results, growth(middle, start), retained, wal)
    purged_at = _db_now(env)
    _purge(env, purged_at, retained, results)
    _wait_vacuum(env, purged_at, sizes.soak_vacuum_wait_s, results)
    second = _drain(env, sizes, body, sizes.soak_batches - half, samples)
    _record_reuse(env, results, (start, middle, table_sizes(env.conn)), (sizes.soak_batches - half) * sizes.soak_items)
    _record_tenths(results, samples, sizes.soak_batches * sizes.soak_items)
    for batch_id in first + second:
        env.forget_batch(batch_id)


def _drain(env: BenchEnv, sizes: Sizes, body: bytes, count: int, samples: list[Sample]) -> list[str]:
    """Submit COUNT batches one after the other (in a thread) while sampling progress; their ids once all final."""
    ids: list[str] = []
    poster = threading.Thread(target=lambda: ids.extend(env.post_batch("soak", body)[0] for _ in range(count)),
                              daemon=True)
    base_s, base_done = (samples[-1].drained_s, samples[-1].done) if samples else (0.0, 0)
    started, want = time.monotonic(), count * sizes.soak_items
    deadline = started + 900 + want / 20  # only a hang crosses this
    poster.start()
    told = 0
    while True:
        done = env.conn.execute("SELECT coalesce(sum(completed + discarded + cancelled), 0) FROM batch_progress"
                                " WHERE batch_id = ANY(%s::uuid[])", (list(ids),)).fetchone()[0]  # type: ignore[index]
        samples.append(Sample(base_s + time.monotonic() - started, base_done + int(done), *_rss(env)))
        if int(done) * 10 // want > told:  # progress on stdout, a line per tenth of this half (a run of an hour)
            told = int(done) * 10 // want
            print(f"[soak] {samples[-1].done:,} items final after {samples[-1].drained_s:.0f} s of draining;"
                  f" RSS API {samples[-1].api_kb // 1024} MiB, workers {samples[-1].workers_kb // 1024} MiB",
                  flush=True)
        if int(done) >= want and not poster.is_alive():
            return ids
        if time.monotonic() > deadline:
            raise RuntimeError(f"soak: {done} of {want} items final after {time.monotonic() - started:.0f} s")
        if env.workers is not None and env.workers.proc.poll() is not None:
            raise RuntimeError(f"relay worker died:\n{env.workers.log()[-3000:]}")
        time.sleep(SAMPLE_S)


def _db_now(env: BenchEnv) -> datetime:
    return env.conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index,no-any-return]


def _rss(env: BenchEnv) -> tuple[int, int]:
    """kB resident in the API's processes and in the workers' processes."""
    api = sysstat.descendants(env.api.proc.pid) if env.api is not None else []
    workers = sysstat.descendants(env.workers.proc.pid) if env.workers is not None else []
    return (sum(sysstat.memory_kb(pid, "VmRSS") for pid in api),
            sum(sysstat.memory_kb(pid, "VmRSS") for pid in workers))


def _purge(env: BenchEnv, cutoff: datetime, items: int, results: Results) -> None:
    """`relay batches purge --finished-before CUTOFF`, then `relay usage purge --before CUTOFF`, as an operator
    keeping one window of both runs them (the second folds the events of the batches the first deleted); how long
    each took for the first half's ITEMS items, its vacuums included."""
    for command in (["batches", "purge", "--finished-before"], ["usage", "purge", "--before"]):
        started = time.monotonic()
        done = subprocess.run([*RELAY, *command, cutoff.isoformat()], env=env.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"relay {' '.join(command[:2])} failed: {done.stdout}{done.stderr}")
        results.add("soak", f"relay {' '.join(command[:2])} of the first half ({items:,} items), vacuums included",
                    time.monotonic() - started, "s")


def _wait_vacuum(env: BenchEnv, since: datetime, wait_s: float, results: Results) -> None:
    """Check that a vacuum visited batch_items and usage_events since the purges began at SINCE (the purges vacuum
    what they deleted from, unless told not to; the space is reused only then), giving autovacuum WAIT_S when none
    did; a plain VACUUM of the purged tables when autovacuum did not come either (noted)."""
    deadline = time.monotonic() + wait_s
    while True:
        row = env.conn.execute("SELECT bool_and(coalesce(greatest(last_vacuum, last_autovacuum) >= %s, false)),"
                               " bool_and(coalesce(last_vacuum >= %s, false)) FROM pg_stat_user_tables"
                               " WHERE relname = ANY(%s)", (since, since, list(VACUUMED))).fetchone()
        if row and row[0]:
            who = "the purges" if row[1] else "autovacuum"
            results.notes.append(f"soak: {who} vacuumed {' and '.join(VACUUMED)} after the purges began")
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(1)
    env.conn.execute(f"VACUUM {', '.join(PURGED_TABLES)}")
    results.notes.append(f"soak: autovacuum had not visited {' and '.join(VACUUMED)} {wait_s:.0f} s after the purges;"
                         f" the soak ran a plain VACUUM of {', '.join(PURGED_TABLES)}")


def _record_sizes(env: BenchEnv, results: Results, grown: dict[str, TableSize], items: int, wal: int) -> None:
    """Bytes per retained item after the first half: all tables, each part, the WAL; per table in the notes."""
    label = f"first half, {items:,} items retained"
    total = sum(s.total for s in grown.values())
    results.add("soak", f"{label}: Postgres bytes per item (tables, indexes, TOAST)", total / items, "B",
                target=("<=", 600))
    for part in ("table", "indexes", "toast"):
        results.add("soak", f"{label}: bytes per item, {part}", sum(getattr(s, part) for s in grown.values()) / items,
                    "B")
    results.add("soak", f"{label}: WAL bytes per item (the whole cluster's)", wal / items, "B")
    results.notes.append(f"soak: Postgres growth per retained item, {label}:\n{report(grown, items)}")
    for table in ("batch_items", "usage_events"):
        each = ", ".join(f"{name} {size / items:.0f} B" for name, size in index_sizes(env.conn, table).items())
        results.notes.append(f"soak: {table} indexes per item: {each}")


def _record_reuse(env: BenchEnv, results: Results, samples: tuple[dict[str, TableSize], ...], items: int) -> None:
    """What the database grew by from before the purge to the end (the purge and the second half of ITEMS items)
    against what the first half grew it by: near 0 when the second half lives in the space the purges freed. All
    tables, and the purged ones; in the notes, each table's share and the large tables' indexes at the end."""
    start, middle, end = samples
    for scope, names in (("all tables", None), ("the purged tables", PURGED_TABLES)):
        first, second = _total(growth(middle, start), names), _total(growth(end, middle), names)
        results.add("soak", f"purge, then second half: growth ÷ first half's growth, {scope}",
                    second / first if first else 0.0, "x", target=("<=", 0.1) if names is None else None)
    results.notes.append(f"soak: growth per item of the second half, after the purges:\n"
                         f"{report(growth(end, middle), items)}")
    for table in VACUUMED:
        each = ", ".join(f"{name} {size / items:.0f} B" for name, size in index_sizes(env.conn, table).items())
        results.notes.append(f"soak: {table} indexes at the end, per item of one half: {each}")


def _total(sizes: dict[str, TableSize], names: tuple[str, ...] | None) -> int:
    """Bytes of the tables NAMES (None: every table) in SIZES."""
    return sum(size.total for name, size in sizes.items() if names is None or name in names)


def _record_tenths(results: Results, samples: list[Sample], total: int) -> None:
    """Items/s in each tenth of the run (by items), and RSS growth after the first tenth (API and workers)."""
    marks = [next((s for s in samples if s.done >= total * k / 10), samples[-1]) for k in range(1, 11)]
    times = [0.0] + [_crossed(samples, total * k / 10) for k in range(1, 11)]
    rates = [total / 10 / max(end - start, 1e-3) for start, end in itertools.pairwise(times)]
    for k, rate in enumerate(rates, start=1):
        results.add("soak", f"items/s, tenth {k}", rate, "items/s")
    results.add("soak", "items/s: last tenth ÷ first tenth", rates[-1] / rates[0], "x", target=(">=", 0.9))
    for who in ("api", "workers"):
        series = [getattr(m, f"{who}_kb") for m in marks]
        results.add("soak", f"{who} RSS growth after the first tenth", _growth_pct(series), "%", target=("<=", 10))
        results.notes.append(f"soak: {who} RSS per tenth (MiB): {', '.join(f'{kb / 1024:.0f}' for kb in series)}")


def _crossed(samples: list[Sample], done: float) -> float:
    """Seconds of draining when DONE items were final, interpolated between the two samples around it (a tenth of
    a small run can end between two samples)."""
    before = Sample(0.0, 0, 0, 0)
    for sample in samples:
        if sample.done >= done:
            share = (done - before.done) / (sample.done - before.done) if sample.done > before.done else 1.0
            return before.drained_s + share * (sample.drained_s - before.drained_s)
        before = sample
    return samples[-1].drained_s


def _growth_pct(series: list[int]) -> float:
    """How far the largest later value is above the first, in per cent."""
    return (max(series[1:], default=series[0]) - series[0]) * 100 / series[0] if series[0] else 0.0
