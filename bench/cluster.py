"""The cluster bench: the same drain on one node (the local services) and on the local cluster of scripts/cluster.sh
(quorum queues on three RabbitMQ nodes, a synchronous Postgres standby), in the same run, and how long the drain
takes to come back after each fault of devtools/cluster/faults.py.

    .venv/bin/python -m bench.cluster                          # drains of 5,000 items x 3, every fault once
    .venv/bin/python -m bench.cluster --items 2000 --repeat 1 --faults leader,failover
    .venv/bin/python -m bench.cluster --items 300 --repeat 1 --faults failover,standby,oldprimary --fault-items 3000

Both sides run two worker groups of one process and THREADS threads against an instant upstream; the drain is
timed from the submit's answer to the last item final, and CPU per item is counted for Relay's worker processes,
Postgres (on the cluster: the monitor and the three data nodes) and RabbitMQ (on the cluster: the three nodes).
Faults run on two groups of 8 threads with a 250 ms upstream (the drain is bound by the upstream, not by this
machine's CPU): the rate while
the fault lasts against the 3 s before it, the longest time without an item finishing, and how long after the
fault ended items finish at 80% of the earlier rate again. The Postgres faults of issue 40 carry its targets: a dead
primary node (failover, and oldprimary, which starts it again) stalls the drain at most 15 s, a dead synchronous
secondary (standby) at most 5 s, and while the old primary dies and rejoins, every data node sampled every 0.5 s
shows one primary at most and no Relay write on the old. The pg_auto_failover monitor's events split a dead
primary's stall: the node marked unhealthy, the failover begun, the secondary promoted (still read-only), writes
allowed on it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench import sysstat
from bench.env import FINAL, SERVICES_DIR
from bench.report import Results
from devtools.cluster import faults
from devtools.cluster.harness import Cluster, ClusterStack, db_now, finish_times, longest_gap, resume_after
from devtools.cluster.pgnodes import PrimaryWatch
from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess
from devtools.services import ensure_services, fresh_services
from devtools.stack import fault_catalog

THREADS = 16
FAULT_MS = 250  # the upstream's latency while a fault is timed: 2 x 8 threads, about 64 items/s, under the CPU's
WARMUP = 300  # items completed before the fault (about 5 s of that drain: a steady rate to compare with)
INSTANT_FAULT_S = 5.0  # a fault that is over at once (a failover): the rate is compared over this long after it
FAULTS: dict[str, Callable[[ClusterStack, Cluster, faults.Pace], faults.Fault]] = {
    "leader": faults.kill_queue_leader, "failover": faults.fail_over_postgres, "mqcut": faults.cut_from_broker,
    "pgcut": faults.cut_from_database, "rolling": faults.rolling_restart, "standby": faults.kill_standby,
    "oldprimary": faults.restart_old_primary}
SCENARIOS = ("drain", *FAULTS)
# The targets: a dead primary node stalls the drain at most 15 s, a dead synchronous secondary at most 5 s.
STALL_TARGETS: dict[str, tuple[str, float]] = {"failover": ("<=", 15.0), "oldprimary": ("<=", 15.0),
                                               "standby": ("<=", 5.0)}
# The monitor's events of a failover, dated after the kill: (what, whose node: the old or the new primary, pattern
# of the event's text or goal state).
EVENTS = (("marked unhealthy", "old", "marked as unhealthy"), ("failover began (draining)", "old", "^draining$"),
          ("secondary promoted, read-only (stop_replication reported)", "new", 'reported by .*"stop_replication"'),
          ("writes allowed (wait_primary or primary reported)", "new", 'reported by .*"(wait_)?primary"'))
NAMES = {"leader": "RabbitMQ node leading the queue killed (restarted after 7 s)",
         "failover": "Postgres primary's node (keeper and Postgres) killed, the monitor promotes a secondary",
         "mqcut": "a worker group cut from RabbitMQ for 10 s", "pgcut": "a worker group cut from Postgres for 15 s",
         "rolling": "rolling restart of 2 APIs and 2 worker groups",
         "standby": "Postgres synchronous secondary's node killed (kept down)",
         "oldprimary": "Postgres primary's node (keeper and Postgres) killed, then started again"}


@dataclass
class Side:
    """One side of the comparison: a stack, how its worker groups reach RabbitMQ, and its services' pids."""

    name: str
    stack: ClusterStack
    broker: Callable[[int], dict[str, str]]
    service_pids: Callable[[], dict[str, list[int]]]


def drain(side: Side, items: int, workers: list[RelayProcess], results: Results, baseline: float | None) -> float:
    """One drain of ITEMS on SIDE's running WORKERS; records items/s and CPU per item; returns items/s."""
    stack = side.stack
    key = stack.new_key("drain")
    before = _cpu(workers, side)
    started = db_now(stack)
    batch_id = stack.submit(key, "drain", items)
    stack.wait_items(batch_id, FINAL, items, timeout=900)
    after = _cpu(workers, side)
    rate = items / (max(finish_times(stack, batch_id)) - started)
    label = f"{items:,} items, 2 groups x {THREADS} threads, {side.name}"
    results.add("cluster drain", f"{label}: items/s", rate, "items/s", baseline=baseline,
                baseline_name="one node" if baseline else "")
    for group, seconds in after.items():
        results.add("cluster drain", f"{label}: CPU per item, {group}",
                    sysstat.cpu_delta(before[group], seconds) * 1000 / items, "ms")
    return rate


def _cpu(workers: list[RelayProcess], side: Side) -> dict[str, dict[int, float]]:
    relay = [pid for proc in workers for pid in sysstat.descendants(proc.proc.pid)]
    return {"relay": sysstat.cpu_seconds(relay),
            **{group: sysstat.cpu_seconds(pids) for group, pids in side.service_pids().items()}}


def time_fault(name: str, stack: ClusterStack, cluster: Cluster, items: int, results: Results) -> None:
    """Run fault NAME during a batch of ITEMS on the cluster; record how long the drain stalled and came back."""
    pace = faults.Pace(name, items=items, during_ms=FAULT_MS, after_ms=FAULT_MS, warmup=WARMUP)
    try:
        fault = FAULTS[name](stack, cluster, pace)
        stack.wait_items(fault.batch_id, FINAL, items, timeout=600)
        times = finish_times(stack, fault.batch_id)
        discarded = stack.count_items(fault.batch_id, "discarded")
    finally:
        stack.stop_processes()
        stack.api_urls = []
        cluster.restore()
    label = NAMES[name]
    ended = max(fault.ended, fault.began + INSTANT_FAULT_S)
    before = rate(times, fault.began - 3.0, fault.began)
    if before > 0:
        results.add("cluster faults", f"{label}: items/s while it lasts ÷ before", rate(times, fault.began, ended)
                    / before, "x")
    results.add("cluster faults", f"{label}: longest stall of the drain", longest_gap(times, fault.began), "s",
                target=STALL_TARGETS.get(name))
    if times and fault.ended < times[-1]:
        results.add("cluster faults", f"{label}: back to 80% of the rate, after it ended",
                    resume_after(times, fault.ended, share=0.8), "s")
    else:  # the fault lasted until the batch was final (a member kept down, or rejoining meanwhile)
        results.add("cluster faults", f"{label}: back to 80% of the rate, after it began",
                    resume_after(times, fault.began, share=0.8), "s")
    results.add("cluster faults", f"{label}: items discarded", discarded, "items")
    if "old_primary" in fault.notes:
        event_figures(label, fault, cluster, results)
    if "watch" in fault.notes:
        watch_figures(label, fault, times, results)


def event_figures(label: str, fault: faults.Fault, cluster: Cluster, results: Results) -> None:
    """The monitor's events of the failover, each from the kill: where pg_auto_failover's part of the stall goes."""
    nodes = {"old": fault.notes["old_primary"], "new": fault.notes["new_primary"]}
    for what, whose, pattern in EVENTS:
        at = cluster.event_time(fault.began, nodes[whose], pattern)
        if at is not None:
            results.add("cluster faults", f"{label}: kill to {what}", at - fault.began, "s")


def watch_figures(label: str, fault: faults.Fault, times: list[float], results: Results) -> None:
    """What the PrimaryWatch of a primary's death saw (every data node sampled every 0.5 s): never two primaries,
    nothing written on the old one, and the stall split into pg_auto_failover's part (the kill to a node taking
    writes) and Relay's (that moment to the next item final)."""
    watch: PrimaryWatch = fault.notes["watch"]
    old = fault.notes["old_primary"]
    results.add("cluster faults", f"{label}: most primaries at once", max(watch.primaries()), "nodes",
                target=("<=", 1))
    results.add("cluster faults", f"{label}: most nodes out of recovery at once", max(watch.out_of_recovery()),
                "nodes", target=("<=", 1))
    results.add("cluster faults", f"{label}: Relay writes on the old primary after it died",
                sum(w for _, w in watch.since_down(old)), "sessions", target=("<=", 0))
    results.add("cluster faults", f"{label}: samples of every data node, 0.5 s apart", len(watch.samples),
                "samples")
    results.add("cluster faults", f"{label}: longest time between two samples", watch.longest_gap(), "s",
                target=("<=", 1.0))  # the "checked every second"
    promoted = watch.promoted_at(old)
    if promoted is None:
        return
    results.add("cluster faults", f"{label}: kill to a new primary taking writes (pg_auto_failover)",
                promoted - fault.began, "s")
    after = [t for t in times if t >= promoted]
    if after:
        results.add("cluster faults", f"{label}: new primary to the next item final (Relay reconnecting)",
                    after[0] - promoted, "s")


def rate(times: list[float], start: float, end: float) -> float:
    """Items per second finishing between START and END."""
    return sum(1 for t in times if start <= t < end) / max(end - start, 1e-9)


def single_side(upstream: FakeUpstream, work: Path, database: str) -> Side:
    """Relay on the local services (scripts/services.sh): its own database and vhost."""
    ensure_services()
    own = fresh_services(database)
    stack = ClusterStack.build(database_url=own.database_url, broker_url=own.broker_url, upstream=upstream,
                               workdir=work / "single", queue_name=f"relay.batch_items.{database}",
                               catalog=fault_catalog(upstream.url, SCENARIOS))

    def pids() -> dict[str, list[int]]:
        with stack.runtime.pool.connection() as conn:
            postgres = sysstat.postgres_pids(conn, database)  # type: ignore[arg-type]
        return {"postgres": postgres, "rabbitmq": sysstat.rabbitmq_pids(SERVICES_DIR)}

    return Side("one node", stack, lambda _: {}, pids)


def cluster_side(upstream: FakeUpstream, cluster: Cluster, work: Path, database: str) -> Side:
    """Relay on CLUSTER, configured as scripts/cluster.sh configures its replicas (its own database and queue)."""
    settings = {**cluster.relay_settings(), "database_url": cluster.create_database(database),
                "queue_name": f"relay.batch_items.{database}"}
    stack = ClusterStack.build(upstream=upstream, workdir=work / "cluster",
                               catalog=fault_catalog(upstream.url, SCENARIOS), **settings)

    def pids() -> dict[str, list[int]]:
        pg = [pid for node in (*cluster.members(), "monitor")
              for pid in _tree(cluster.directory / "pg" / node / "postmaster.pid")]
        mq = [pid for n in (1, 2, 3) for pid in _tree(cluster.directory / f"rabbit{n}" / "rabbit.pid")]
        return {"postgres": pg, "rabbitmq": mq}

    return Side("cluster", stack, cluster.broker_settings, pids)


def _tree(pid_file: Path) -> list[int]:
    try:
        return sysstat.descendants(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return []


def run(cluster: Cluster, items: int, repeat: int, fault_names: Iterable[str], fault_items: int,
        database: str = "relay_cluster_bench", log: Callable[[str], None] = print) -> Results:
    """Drain ITEMS REPEAT times on each side (alternating), then time each fault on CLUSTER (already up)."""
    results = Results()
    upstream = start_fake_upstream(process=True)
    upstream.settings(request_log_size=max(items, fault_items) * 2)
    work = Path(tempfile.mkdtemp(prefix="relay-bench-cluster-"))
    sides: list[Side] = []
    try:
        sides = [single_side(upstream, work, database), cluster_side(upstream, cluster, work, database)]
        groups = [[side.stack.start_worker(THREADS, **side.broker(node)) for node in (2, 3)] for side in sides]
        for run_no in range(repeat):
            log(f"[bench.cluster] drain {run_no + 1}/{repeat}")
            single = drain(sides[0], items, groups[0], results, None)
            drain(sides[1], items, groups[1], results, single)
        for side in sides:
            side.stack.stop_processes()
        for name in fault_names:
            log(f"[bench.cluster] fault {name}")
            upstream.reset()
            upstream.settings(request_log_size=fault_items * 2)
            time_fault(name, sides[1].stack, cluster, fault_items, results)
    finally:
        for side in sides:
            side.stack.close()
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)
        if sides:
            drop_services(database)
    return results


def drop_services(name: str) -> None:
    """Drop the one-node side's database and vhost."""
    import psycopg
    import requests

    from devtools.services import ADMIN_DB_URL, MQ_UI_PORT

    with psycopg.connect(ADMIN_DB_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    requests.delete(f"http://127.0.0.1:{MQ_UI_PORT}/api/vhosts/{name}", auth=("guest", "guest"), timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000, help="items of each drain")
    parser.add_argument("--repeat", type=int, default=3, help="drains on each side (the table shows medians)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {','.join(FAULTS)}")
    parser.add_argument("--fault-items", type=int, default=4000, help="items of the batch each fault hits")
    parser.add_argument("--database", default="relay_cluster_bench",
                        help="the one-node side's database and vhost on the local services, and the cluster's database")
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "cluster.json")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(unknown)}")
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="relay-cluster-")), database=args.database)
    started = time.monotonic()
    try:
        print("[bench.cluster] starting the cluster (scripts/cluster.sh up --services-only)")
        cluster.up()
        results = run(cluster, args.items, max(1, args.repeat), names, args.fault_items, database=args.database)
    finally:
        cluster.down()
        shutil.rmtree(cluster.directory, ignore_errors=True)
    results.write_json(args.json, " ".join(["python -m bench.cluster", *sys.argv[1:]]))
    print(results.table())
    print(f"[bench.cluster] done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
