"""pg_auto_failover against Patroni for issue 40's dead primary machine: how long writes stall when the primary's
keeper (`pg_autoctl`) and its Postgres die together, on the shortest safe timeouts.

    .venv/bin/python -m bench.cluster_pgaf --runs 3
    .venv/bin/python -m bench.cluster_pgaf --runs 1 --set pgautofailover.primary_demote_timeout=10000
    .venv/bin/python -m bench.cluster_pgaf --runs 1 --set defaults        # pg_auto_failover's own timeouts

Each run builds, in a temp dir and on loopback ports claimed from devtools/cluster/ports.py, a pg_auto_failover
monitor and two data nodes (a primary and a synchronous secondary: Debian's postgresql-15-auto-failover, every
process run as `postgres`). A writer commits one row every 20 ms through a multi-host URL with
`target_session_attrs=read-write` and records each commit's time and node; the primary's process group (keeper,
postmaster, backends) is SIGKILLed, as when its machine dies; the stall is the last commit before the kill to the
first on the promoted node, with no human step. The killed node is then started again and must come back as a
secondary: both data nodes are sampled every 0.25 s from the kill to the end, and at most one may pass libpq's
read-write test. The monitor's events split the stall into detection, the promotion and the demote wait.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.report import Results
from devtools.cluster.harness import longest_gap
from devtools.cluster.ports import reserve
from devtools.waiting import until

PG_CTL = "/usr/lib/postgresql/15/bin/pg_ctl"
HOST = "127.0.0.1"  # every server listens on loopback only
WRITE_EVERY_S = 0.02
SAMPLE_EVERY_S = 0.25
# The monitor's settings (milliseconds): a dead node is found by one failed connection a second (health checks on
# loopback are refused at once), and is unhealthy once it also has not reported for 2 s (its keeper reports every
# second). The promotion then waits primary_demote_timeout, which must outlast the keepers' own
# network_partition_timeout: a primary cut off from the monitor and its standby stops its Postgres after that
# long, so the promoted standby (read-only meanwhile) takes writes only once a live but cut-off primary has
# stepped down (the same ordering as the defaults, 30 s over 20 s).
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.primary_demote_timeout": "5000",
}
KEEPER_SETTINGS = {"timeout.network_partition_timeout": "3"}  # seconds
DEFAULTS = {"pgautofailover.health_check_period": "5000", "pgautofailover.health_check_timeout": "5000",
            "pgautofailover.health_check_max_retries": "2", "pgautofailover.health_check_retry_delay": "2000",
            "pgautofailover.node_considered_unhealthy_timeout": "20000",
            "pgautofailover.primary_demote_timeout": "30000", "timeout.network_partition_timeout": "20"}
# The target for a dead primary machine, which Patroni (ttl >= 20 s) cannot meet.
STALL_TARGET = ("<=", 15.0)


@dataclass
class Formation:
    """A pg_auto_failover monitor and two data nodes, `a` and `b`, under DIRECTORY, each a process group of ours."""

    directory: Path
    ports: dict[str, int]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def claim(cls, directory: Path) -> Formation:
        """A formation under DIRECTORY (readable by `postgres`) on three ports claimed for it."""
        shutil.chown(directory, "postgres", "postgres")
        return cls(directory, dict(zip(("monitor", "a", "b"), reserve(3, directory), strict=True)))

    def build(self, keeper: dict[str, str], monitor: dict[str, str]) -> None:
        """Initialise and start the monitor, then `a` (the primary), then `b` (its secondary, a base backup)."""
        self.autoctl("create", "monitor", *self._node_args("monitor"))
        self.start("monitor")
        until(self._monitor_answers, what="the monitor to take connections")
        self.configure_monitor(monitor)
        monitor_url = f"postgres://autoctl_node@{HOST}:{self.ports['monitor']}/pg_auto_failover?sslmode=disable"
        for name in ("a", "b"):
            self.autoctl("create", "postgres", *self._node_args(name), "--name", name, "--monitor", monitor_url)
            for key, value in keeper.items():
                self.autoctl("config", "set", "--pgdata", str(self.pgdata(name)), key, value)
            self.start(name)
            self.wait_state(name, ("single", "secondary"), "to join")
        until(self.primary, what="a primary with its secondary", timeout=300)

    def wait_state(self, name: str, states: tuple[str, ...], what: str) -> None:
        until(lambda: self.states().get(name), lambda s: s in states, what=f"{name} {what}", timeout=300)

    def _node_args(self, name: str) -> list[str]:
        return ["--pgdata", str(self.pgdata(name)), "--pgport", str(self.ports[name]), "--hostname", HOST,
                "--listen", HOST, "--auth", "trust", "--no-ssl", "--pgctl", PG_CTL]

    def pgdata(self, name: str) -> Path:
        return self.directory / name

    def _command(self, *args: str) -> list[str]:
        """pg_autoctl as `postgres` (Postgres refuses root), its configuration and state files under our dir."""
        xdg = {"XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "share", "XDG_RUNTIME_DIR": "run"}
        return ["runuser", "-u", "postgres", "--", "env", *(f"{k}={self.directory / v}" for k, v in xdg.items()),
                "pg_autoctl", *args]

    def autoctl(self, *args: str) -> str:
        done = subprocess.run(self._command(*args), capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def start(self, name: str) -> None:
        """`pg_autoctl run` for NAME in a process group of its own: its keeper, postmaster and backends."""
        log = (self.directory / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(self._command("run", "--pgdata", str(self.pgdata(name))), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill(self, name: str) -> float:
        """SIGKILL NAME's whole process group at once, as when its machine dies; when it was sent (a commit
        answered after that came from elsewhere)."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        killed = time.time()
        proc.wait(timeout=60)
        return killed

    def close(self) -> None:
        """Stop every process group this formation started (SIGTERM, then SIGKILL past 30 s)."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
        self.procs.clear()

    def url(self, name: str, dbname: str = "postgres") -> str:
        return f"host={HOST} port={self.ports[name]} user=postgres dbname={dbname} connect_timeout=2"

    def writer_url(self) -> str:
        """What Relay is told: both data nodes, the one taking writes kept (docs/cluster.md)."""
        return (f"host={HOST},{HOST} port={self.ports['a']},{self.ports['b']} user=postgres dbname=postgres "
                "target_session_attrs=read-write connect_timeout=2")

    def monitor_query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url("monitor", "pg_auto_failover"), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def _monitor_answers(self) -> bool:
        try:
            return bool(self.monitor_query("SELECT 1"))
        except psycopg.OperationalError:
            return False

    def configure_monitor(self, settings: dict[str, str]) -> None:
        for key, value in settings.items():
            self.monitor_query(f"ALTER SYSTEM SET {key} = '{int(value)}'")
        self.monitor_query("SELECT pg_reload_conf()")

    def synchronous(self, primary: str) -> bool:
        """Whether PRIMARY's standby replicates synchronously (a commit waits for it)."""
        with psycopg.connect(self.url(primary), autocommit=True) as conn:
            rows = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
        return any(state in ("sync", "quorum") for state, in rows)

    def states(self) -> dict[str, str]:
        """Each data node's state as last reported to the monitor."""
        return dict(self.monitor_query("SELECT nodename, reportedstate::text FROM pgautofailover.node"))

    def primary(self) -> str | None:
        """The node reported primary while the other is a reported secondary (a settled pair), or None."""
        states = self.states()
        found = [n for n, s in states.items() if s == "primary"]
        return found[0] if found and sorted(states.values()) == ["primary", "secondary"] else None

    def event_time(self, since: float, node: str, pattern: str) -> float | None:
        """Epoch time of the first monitor event about NODE since SINCE whose text or goal matches PATTERN."""
        rows = self.monitor_query(
            "SELECT extract(epoch FROM eventtime)::float8 FROM pgautofailover.event WHERE nodename = %s"
            " AND eventtime >= to_timestamp(%s) AND (description ~ %s OR goalstate::text ~ %s)"
            " ORDER BY eventid LIMIT 1", (node, since, pattern, pattern))
        return float(rows[0][0]) if rows else None


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class Writer(threading.Thread):
    """Commits one row every 20 ms through URL, reconnecting after any failure; records each commit's (time on the
    server's clock, this machine's, so that a reply read late is not counted after the kill; node port)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.commits: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self.stopping.is_set():
            began = time.time()
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True)
                    port = int(conn.info.port)
                row = conn.execute("INSERT INTO pgaf_writes (at) VALUES (clock_timestamp())"
                                   " RETURNING extract(epoch FROM at)::float8").fetchone()
                if row is not None:
                    self.commits.append((float(row[0]), port))
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
            self.stopping.wait(max(0.0, began + WRITE_EVERY_S - time.time()))
        if conn is not None:
            conn.close()


class Sampler(threading.Thread):
    """Every 0.25 s, which data nodes take writes by libpq's read-write test (out of recovery and not read-only),
    and which are out of recovery at all (a standby promoted read-only is, before the monitor lets it take
    writes): (time, writable ports, out-of-recovery ports)."""

    def __init__(self, urls: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.samples: list[tuple[float, list[int], list[int]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            began = time.time()
            roles = {port: _role(url) for port, url in self.urls.items()}
            self.samples.append((began, [p for p, r in roles.items() if r == "writable"],
                                 [p for p, r in roles.items() if r in ("writable", "read-only")]))
            self.stopping.wait(max(0.0, began + SAMPLE_EVERY_S - time.time()))


def _role(url: str) -> str:
    """`writable`, `read-only` (out of recovery), `standby`, or `down`."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=1) as conn:
            row = conn.execute("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").fetchone()
    except psycopg.Error:
        return "down"
    if row is None or row[0]:
        return "standby"
    return "read-only" if row[1] == "on" else "writable"


def one_run(work: Path, settings: dict[str, str], results: Results, log: Any = print) -> None:
    """Build a formation, kill its primary machine under a writer, restart it; record what it cost."""
    monitor = {k: v for k, v in settings.items() if k.startswith("pgautofailover.")}
    keeper = {k: v for k, v in settings.items() if k.startswith("timeout.")}
    formation = Formation.claim(Path(tempfile.mkdtemp(prefix="pgaf-", dir=work)))
    try:
        formation.build(keeper, monitor)
        old = str(until(formation.primary, what="a primary"))
        new = "b" if old == "a" else "a"
        with psycopg.connect(formation.url(old), autocommit=True) as conn:
            conn.execute("CREATE TABLE pgaf_writes (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
        writer, sampler = Writer(formation.writer_url()), Sampler({p: formation.url(n) for n, p in
                                                                  formation.ports.items() if n != "monitor"})
        writer.start()
        until(lambda: len(writer.commits), lambda n: n >= 100, what="100 commits before the kill")
        results.add("dead primary machine", "secondary synchronous before the kill (its pg_stat_replication row)",
                    float(formation.synchronous(old)), "1 = sync or quorum", target=(">=", 1))
        sampler.start()
        killed = formation.kill(old)
        log(f"[bench.cluster_pgaf] killed {old}'s machine (keeper and Postgres); waiting for writes on {new}")
        until(lambda: [t for t, p in writer.commits if p == formation.ports[new]], what="writes on the promoted node")
        time.sleep(2.0)
        restarted = time.time()
        formation.start(old)
        formation.wait_state(old, ("secondary",), "back as a secondary")
        time.sleep(2.0)
        writer.stopping.set()
        sampler.stopping.set()
        writer.join(60)
        sampler.join(60)
        record(formation, results, writer, sampler, Moments(old, new, killed, restarted))
    finally:
        formation.close()
        shutil.rmtree(formation.directory, ignore_errors=True)


@dataclass
class Moments:
    old: str
    new: str
    killed: float
    restarted: float


def record(formation: Formation, results: Results, writer: Writer, sampler: Sampler, m: Moments) -> None:
    """The run's figures: the stall and its parts, the rejoin's own stall, and the two fencing checks."""
    old_port, new_port = formation.ports[m.old], formation.ports[m.new]
    before = [t for t, _ in writer.commits if t <= m.killed]
    first_new = min(t for t, p in writer.commits if p == new_port and t > m.killed)
    stall = first_new - max(before)
    results.add("dead primary machine", "write stall (last commit before the kill to the first on the new primary)",
                stall, "s", target=STALL_TARGET)
    moments = {"marked unhealthy": formation.event_time(m.killed, m.old, "marked as unhealthy"),
               "failover began (draining)": formation.event_time(m.killed, m.old, "^draining$"),
               "standby promoted read-only (stop_replication reported)": formation.event_time(
                   m.killed, m.new, 'reported by .*"stop_replication"'),
               "writes allowed (wait_primary reported)": formation.event_time(
                   m.killed, m.new, 'reported by .*"wait_primary"')}
    for name, at in moments.items():
        if at is not None:
            results.add("dead primary machine", f"kill to {name}", at - m.killed, "s")
    after = [t for t, _ in writer.commits if t >= first_new]
    results.add("dead primary machine", "longest stall while the old primary restarts and rejoins",
                longest_gap(after, m.restarted) if after else float("inf"), "s")
    results.add("dead primary machine", "last commit on the old primary, after the kill was sent (< 0: before)",
                (max(t for t, p in writer.commits if p == old_port) - m.killed) * 1000, "ms")
    results.add("dead primary machine", "commits on the old primary once the new one took writes",
                sum(1 for t, p in writer.commits if p == old_port and t >= first_new), "commits", target=("<=", 0))
    results.add("dead primary machine", "most data nodes taking writes at once (read-write test)",
                max(len(writable) for _, writable, _ in sampler.samples), "nodes", target=("<=", 1))
    results.add("dead primary machine", "most data nodes out of recovery at once",
                max(len(promoted) for _, _, promoted in sampler.samples), "nodes")
    results.add("dead primary machine", "samples of both data nodes, 0.25 s apart", len(sampler.samples),
                "samples")
    results.add("dead primary machine", "old primary's state after its restart",
                1.0 if formation.states().get(m.old) == "secondary" else 0.0, "1 = secondary", target=(">=", 1))


def parse_settings(text: str) -> dict[str, str]:
    """NAME=VALUE[,NAME=VALUE...] over the bench's settings (`defaults` for pg_auto_failover's own)."""
    if text == "defaults":
        return dict(DEFAULTS)
    settings = {**MONITOR_SETTINGS, **KEEPER_SETTINGS}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = pair.partition("=")
        if key not in DEFAULTS or not value.isdigit():
            raise argparse.ArgumentTypeError(f"{pair!r}: NAME=INTEGER with NAME among {', '.join(DEFAULTS)}")
        settings[key] = value
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_pgaf", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh formations, one primary machine killed in each")
    parser.add_argument("--set", dest="settings", type=parse_settings, default=parse_settings(""),
                        help="NAME=VALUE,... over the bench's timeouts, or `defaults` (pg_auto_failover's own)")
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "cluster_pgaf.json")
    args = parser.parse_args(argv)
    if shutil.which("pg_autoctl") is None:
        parser.error("pg_autoctl is missing: apt-get install -y postgresql-15-auto-failover")
    print("[bench.cluster_pgaf] settings: " + ", ".join(f"{k}={v}" for k, v in args.settings.items()))
    results = Results()
    work = Path(tempfile.mkdtemp(prefix="relay-bench-pgaf-"))
    work.chmod(0o755)  # the formations inside belong to `postgres`
    try:
        for run_no in range(max(1, args.runs)):
            print(f"[bench.cluster_pgaf] run {run_no + 1}/{args.runs}")
            one_run(work, args.settings, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results.notes.append("settings: " + ", ".join(f"{k}={v}" for k, v in args.settings.items()))
    results.write_json(args.json, " ".join(["python -m bench.cluster_pgaf", *sys.argv[1:]]))
    print(results.table())
    for fig in results.figures.values():
        values = ", ".join(f"{v:.2f}" for v in fig.values)
        print(f"{fig.name}: {values} {fig.unit} (median {statistics.median(fig.values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
