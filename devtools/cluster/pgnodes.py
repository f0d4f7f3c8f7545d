"""Postgres data nodes of the local cluster seen from outside: what each is (libpq's read-write test, as Relay's
multi-host URL asks), a watch sampling them all through a fault, and the keepers' processes (a node's process
group, its pid in .cluster/pg/NAME.pid)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import Protocol

import psycopg


class Nodes(Protocol):
    """What a watch needs of a cluster (devtools.cluster.harness.Cluster): its data nodes and their ports."""

    def members(self) -> tuple[str, ...]: ...

    def pg_port(self, node: str) -> int: ...


def node_state(port: int, relay_database: str = "") -> tuple[str, int]:
    """What Postgres on PORT is: "primary" (passes libpq's read-write test), "read-only" (out of recovery but
    read-only: a secondary being promoted), "standby" (in recovery) or "down"; and how many sessions of
    RELAY_DATABASE there hold a transaction id (a write)."""
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute("SELECT pg_is_in_recovery(), current_setting('transaction_read_only'),"
                               " (SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                               " AND backend_xid IS NOT NULL)", (relay_database,)).fetchone()
    except psycopg.Error:
        return "down", 0
    assert row is not None
    if row[0]:
        return "standby", int(row[2])
    return "read-only" if row[1] == "on" else "primary", int(row[2])


def _stat(pid: int | str) -> tuple[str, list[str]]:
    """/proc/PID/stat: (the command's name, the fields after it: state, ppid, pgrp, ...); ("", []) if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", []
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether PID runs (not a zombie nobody has reaped)."""
    fields = _stat(pid)[1] if pid > 0 else []
    return bool(fields) and fields[0] != "Z"


def group_members(pgid: int, name: str) -> list[int]:
    """The processes of process group PGID whose command is NAME."""
    found = []
    for entry in os.listdir("/proc") if pgid > 0 else []:
        if entry.isdigit():
            comm, fields = _stat(entry)
            if comm == name and len(fields) > 2 and fields[2] == str(pgid):
                found.append(int(entry))
    return found


class PrimaryWatch:
    """Samples every Postgres data node every INTERVAL_S on a thread while in use: what each is (node_state: how
    many take writes at each sample), and the sessions of Relay's database on each that held a transaction id (a
    write)."""

    def __init__(self, cluster: Nodes, database_url: str, interval_s: float = 0.5) -> None:
        self.cluster, self.interval_s = cluster, interval_s
        self.database = database_url.split("?", 1)[0].rsplit("/", 1)[1]
        self.samples: list[dict[str, tuple[str, int]]] = []  # {"a": (node_state, writes), ...}
        self.times: list[float] = []  # epoch seconds of each sample (this machine's clock, as the database's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="primary-watch", daemon=True)

    def __enter__(self) -> PrimaryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def primaries(self) -> list[int]:
        """The number of data nodes taking writes at each sample."""
        return [sum(1 for state, _ in sample.values() if state == "primary") for sample in self.samples]

    def out_of_recovery(self) -> list[int]:
        """The number of data nodes out of recovery (taking writes, or promoted and read-only) at each sample."""
        return [sum(1 for state, _ in sample.values() if state in ("primary", "read-only"))
                for sample in self.samples]

    def since_down(self, node: str) -> list[tuple[str, int]]:
        """NODE's (state, Relay sessions holding a transaction id) at each sample from the first that found it
        down on."""
        states = [sample[node] for sample in self.samples]
        first = next((i for i, (state, _) in enumerate(states) if state == "down"), len(states))
        return states[first:]

    def longest_gap(self) -> float:
        """The longest time between two samples' starts (the interval plus each sample's own time)."""
        return max((b - a for a, b in itertools.pairwise(self.times)), default=0.0)

    def promoted_at(self, old: str) -> float | None:
        """When a node other than OLD was first found taking writes after OLD was found down (epoch seconds);
        None if never."""
        down = False
        for at, sample in zip(self.times, self.samples, strict=True):
            down = down or sample[old][0] == "down"
            if down and any(state == "primary" for node, (state, _) in sample.items() if node != old):
                return at
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            at = time.time()
            sample = {node: self._sample(node) for node in self.cluster.members()}
            self.times.append(at)
            self.samples.append(sample)

    def _sample(self, node: str) -> tuple[str, int]:
        return node_state(self.cluster.pg_port(node), self.database)
