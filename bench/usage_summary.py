"""Usage summary speed: a one-day summary grouped by model over 1,000,000 events must answer in < 200 ms.

Creates a scratch database (dropped at the end unless --keep), applies Relay's migrations, loads synthetic
events with COPY (time-ordered, as real inserts are), VACUUM ANALYZEs, then times the real query
(`app.usage.store.summarize`, as `GET /v1/usage/summary?group_by=model&from=..&to=..` runs it) against a
baseline `SELECT count(*)` over the same day, and prints the medians and their ratio.

    .venv/bin/python -m bench.usage_summary [--events 1000000] [--days 7] [--runs 15] [--keep]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from app.migrate import apply_migrations
from app.usage.queries import UsageFilter, Visibility
from app.usage.store import summarize

ADMIN_URL = "postgresql://postgres@127.0.0.1:54329/postgres"
COLUMNS = ("request_id", "source", "created_at", "started_at", "duration_ms", "status", "error_code",
           "model_requested", "model_resolved", "host_id", "host_name", "credential_kind", "credential_id",
           "principal_kind", "principal_id", "policy_id", "project_id", "team_id", "input_tokens",
           "output_tokens", "cached_tokens", "cost_nanos", "attempts", "batch_id", "batch_idx")


def main() -> None:
    args = _parse()
    database_url = ADMIN_URL.rsplit("/", 1)[0] + "/" + args.database
    _recreate(args.database)
    try:
        apply_migrations(database_url)
        end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        start = end - timedelta(days=args.days)
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            took = _load(conn, args.events, start, end)
            print(f"loaded {args.events:,} events over {args.days} days with COPY in {took:.1f} s")
            conn.commit()
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE usage_events")
            _measure(conn, end - timedelta(days=1), end, args.runs)
        no_index = "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off"
        with psycopg.connect(database_url, row_factory=dict_row, autocommit=True, options=no_index) as conn:
            _measure_without_indexes(conn, end - timedelta(days=1), end, max(3, args.runs // 3))
    finally:
        if not args.keep:
            _drop(args.database)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--days", type=int, default=7, help="spread the events evenly over this many days")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--database", default="relay_bench_usage")
    p.add_argument("--keep", action="store_true", help="keep the scratch database")
    return p.parse_args()


def _recreate(name: str) -> None:
    _drop(name)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _load(conn: psycopg.Connection[Any], count: int, start: datetime, end: datetime) -> float:
    """COPY COUNT synthetic events with created_at rising evenly from START to END."""
    rng = random.Random(42)
    ids = {k: [uuid.UUID(int=rng.getrandbits(128)) for _ in range(n)]
           for k, n in (("host", 4), ("policy", 6), ("project", 12), ("team", 5), ("principal", 200),
                        ("credential", 300), ("batch", 500))}
    models = [f"model-{i}" for i in range(24)]
    step = (end - start) / count
    began = time.perf_counter()
    with conn.cursor() as cur, cur.copy(f"COPY usage_events ({', '.join(COLUMNS)}) FROM STDIN") as copy:
        for i in range(count):
            copy.write_row(_event(rng, ids, models, start + step * i, i))
    return time.perf_counter() - began


def _event(rng: random.Random, ids: dict[str, list[uuid.UUID]], models: list[str], at: datetime,
           i: int) -> tuple[Any, ...]:
    batch = rng.random() < 0.2
    status = rng.choices((200, 429, 500, 404), weights=(92, 4, 2, 2))[0]
    ok = status < 300
    host = rng.randrange(4)
    tokens_in, tokens_out = rng.randrange(10, 4000), rng.randrange(1, 1200)
    return (f"req-{i}", "batch" if batch else "live", at, at, rng.random() * 900, status,
            None if ok else "upstream_error", rng.choice(models), "upstream-x", ids["host"][host], f"host-{host}",
            "relay_key", rng.choice(ids["credential"]), "user", rng.choice(ids["principal"]),
            rng.choice(ids["policy"]), rng.choice(ids["project"]), rng.choice(ids["team"]),
            tokens_in if ok else 0, tokens_out if ok else 0, rng.randrange(0, tokens_in) if ok else 0,
            tokens_in * 2500 + tokens_out * 10000 if ok else None, 1,
            rng.choice(ids["batch"]) if batch else None, i if batch else None)


def _measure(conn: psycopg.Connection[Any], day_start: datetime, day_end: datetime, runs: int) -> None:
    flt = UsageFilter(from_=day_start, to=day_end)

    def summary() -> Any:
        return summarize(conn, flt, Visibility.everything(), group_by=["model"], bucket=None, max_rows=10_000)

    def baseline() -> Any:
        return conn.execute("SELECT count(*) FROM usage_events WHERE created_at >= %s AND created_at < %s",
                            (day_start, day_end)).fetchone()

    totals, rows = summary()
    print(f"one day: {totals['requests']:,} events, {len(rows)} models, cost_nanos {totals['cost_nanos']}")
    base_ms = _median_ms(baseline, runs)
    summary_ms = _median_ms(summary, runs)
    print(f"baseline  SELECT count(*) over the day : median {base_ms:7.1f} ms ({runs} runs)")
    print(f"summary   group_by=model over the day  : median {summary_ms:7.1f} ms ({runs} runs)")
    print(f"ratio summary/baseline: {summary_ms / base_ms:.2f}x; target < 200 ms: "
          f"{'PASS' if summary_ms < 200 else 'FAIL'}")


def _measure_without_indexes(conn: psycopg.Connection[Any], day_start: datetime, day_end: datetime,
                             runs: int) -> None:
    """The same summary on a connection that may not use indexes (a table scan), for comparison."""
    flt = UsageFilter(from_=day_start, to=day_end)
    ms = _median_ms(lambda: summarize(conn, flt, Visibility.everything(), group_by=["model"], bucket=None,
                                      max_rows=10_000), runs)
    print(f"summary   without indexes (table scan) : median {ms:7.1f} ms ({runs} runs, for comparison)")


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm the cache once
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
