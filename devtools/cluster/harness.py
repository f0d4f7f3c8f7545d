"""The local cluster of scripts/cluster.sh driven from Python (start, stop, kill, promote, rejoin), a TCP proxy a test
can cut, and a fault-test Stack whose API calls go through the real `relay api` replicas."""

from __future__ import annotations

import itertools
import os
import selectors
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import requests

from devtools.cluster.pgnodes import alive, group_members, node_state
from devtools.processes import ROOT, RelayProcess
from devtools.stack import Stack

SCRIPT = ROOT / "scripts" / "cluster.sh"


@dataclass
class Cluster:
    """A cluster under DIRECTORY (RELAY_CLUSTER_DIR): three RabbitMQ nodes and Postgres under pg_auto_failover (a
    monitor and three data nodes), no Relay process."""

    directory: Path
    database: str = "relay_cluster"
    state: dict[str, str] = field(default_factory=dict)

    def sh(self, *args: str, timeout: float = 300) -> str:
        """Run `scripts/cluster.sh ARGS` on this cluster; its standard output."""
        env = {**os.environ, "RELAY_CLUSTER_DIR": str(self.directory), "RELAY_CLUSTER_DB": self.database}
        out = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"cluster.sh {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
        return out.stdout

    def up(self) -> None:
        # A generous bound: three RabbitMQ nodes, the monitor and three data nodes start in about 40 s at a load of
        # 4, and a loaded machine takes several times that.
        self.sh("up", "--services-only", timeout=900)
        for line in (self.directory / "cluster.env").read_text().split("\n"):
            for word in shlex.split(line):
                name, _, value = word.partition("=")
                self.state[name] = value

    def down(self, kill: bool = False) -> None:
        """Stop every process of the cluster gracefully, or (KILL) kill them at once, for a cluster to remove."""
        self.sh("down", *(["--kill"] if kill else []))

    def relay_settings(self, first_node: int = 1) -> dict[str, str]:
        """The Relay settings (lower-case names) cluster.sh gives a replica whose broker list starts at FIRST_NODE."""
        wanted = ("database_url", "broker_url", "broker_failover_urls", "queue_type", "queue_name")
        found: dict[str, str] = {}
        for line in self.sh("env", str(first_node)).splitlines():
            for word in shlex.split(line)[1:]:
                name, _, value = word.partition("=")
                if name.removeprefix("RELAY_").lower() in wanted:
                    found[name.removeprefix("RELAY_").lower()] = value
        return found

    def broker_settings(self, first_node: int) -> dict[str, str]:
        """broker_url and broker_failover_urls of a replica whose broker list starts at FIRST_NODE."""
        found = self.relay_settings(first_node)
        return {"broker_url": found["broker_url"], "broker_failover_urls": found["broker_failover_urls"]}

    # -- RabbitMQ ------------------------------------------------------------------------------------------
    def mq_port(self, node: int) -> int:
        return int(self.state[f"MQ{node}_PORT"])

    def leader(self, queue: str) -> int:
        """The RabbitMQ node (1..3) leading QUEUE."""
        return int(self.sh("leader", queue).strip().removeprefix("rabbit"))

    def kill(self, name: str) -> None:
        self.sh("kill", name)

    def start(self, name: str) -> None:
        self.sh("start", name)

    # -- Postgres (under pg_auto_failover) -------------------------------------------------------------------
    def members(self) -> tuple[str, ...]:
        """The data nodes (the monitor holds no data of Relay's)."""
        return ("a", "b", "c")

    def role(self, node: str) -> str:
        """The state the monitor last heard from NODE ("primary", "secondary", "wait_primary", ...), "down" when
        its keeper does not run (its node was killed or stopped)."""
        if not alive(self._pid(node)):
            return "down"
        try:
            rows = self.monitor_query("SELECT reportedstate::text FROM pgautofailover.node WHERE nodename = %s",
                                      (f"pg-{node}",))
        except psycopg.Error:  # the monitor is down
            return "unknown"
        return str(rows[0][0]) if rows else "unknown"

    def primary(self, timeout: float = 60, other_than: str = "") -> str:
        """"a", "b" or "c": the node that takes writes (waits up to TIMEOUT for one, not OTHER_THAN)."""
        deadline = time.monotonic() + timeout
        while True:
            for node in self.members():
                if node != other_than and self.writable(node):
                    return node
            if time.monotonic() > deadline:
                raise AssertionError(f"no Postgres primary (other than {other_than!r}) after {timeout} s")
            time.sleep(0.2)

    def writable(self, node: str) -> bool:
        """Whether Postgres of NODE passes libpq's read-write test (out of recovery, not read-only), as Relay's
        multi-host URL asks."""
        return node_state(self.pg_port(node))[0] == "primary"

    def pg_port(self, node: str) -> int:
        return int(self.state[f"PG{node.upper()}_PORT"])

    def node_url(self, node: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port(node)}/{self.database}"

    def monitor_query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of SQL on the pg_auto_failover monitor's database."""
        url = f"postgresql://postgres@127.0.0.1:{self.state['PGMONITOR_PORT']}/pg_auto_failover"
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def event_time(self, since: float, node: str, pattern: str) -> float | None:
        """Epoch time of the monitor's first event about NODE since SINCE whose text or goal state matches PATTERN."""
        rows = self.monitor_query(
            "SELECT extract(epoch FROM eventtime)::float8 FROM pgautofailover.event WHERE nodename = %s"
            " AND eventtime >= to_timestamp(%s) AND (description ~ %s OR goalstate::text ~ %s)"
            " ORDER BY eventid LIMIT 1", (f"pg-{node}", since, pattern, pattern))
        return float(rows[0][0]) if rows else None

    def fail_over(self) -> tuple[str, str]:
        """SIGKILL the primary's node (its keeper and Postgres: its machine dies) and wait until the monitor has
        promoted a secondary, with no human step; (old primary, new primary)."""
        old = self.primary()
        self.kill(f"pg-{old}")
        return old, self.primary(timeout=120, other_than=old)

    def freeze_manager(self, node: str, frozen: bool = True) -> None:
        """SIGSTOP (FROZEN) or SIGCONT NODE's keeper (every pg_autoctl process of its group): its Postgres runs
        on, and no goal the monitor assigns it is applied."""
        for pid in group_members(self._pid(node), "pg_autoctl"):
            os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def _pid(self, node: str) -> int:
        try:
            return int((self.directory / "pg" / f"{node}.pid").read_text())
        except (OSError, ValueError):
            return 0

    def wait_healthy(self, timeout: float = 180) -> None:
        """Wait until a primary streams to both secondaries, either one enough for a commit, each data node in
        the state the monitor assigned it (after a fault, a returning node rejoins as a secondary by itself)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if len(self.synchronous_standbys()) == 2 and self.settled():
                    return
            except (psycopg.Error, AssertionError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no primary with two synchronous secondaries after {timeout} s")
            time.sleep(0.5)

    def restore(self) -> None:
        """Start every data node a fault left down (its machine is back), and wait until each rejoined."""
        for node in self.members():
            if self.role(node) == "down":
                self.start(f"pg-{node}")
        self.wait_healthy()

    def settled(self) -> bool:
        """Whether the monitor has one primary and two secondaries, each in the state assigned to it."""
        rows = self.monitor_query("SELECT reportedstate::text, goalstate::text FROM pgautofailover.node")
        return sorted(r for r, g in rows if r == g) == ["primary", "secondary", "secondary"]

    def create_database(self, name: str) -> str:
        """Create database NAME on the primary (if missing, with the migrations); its multi-host URL."""
        with psycopg.connect(self.node_url(self.primary()).rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        url = self.relay_settings()["database_url"].replace(f"/{self.database}?", f"/{name}?")
        from app.migrate import apply_migrations

        apply_migrations(url)
        return url

    def synchronous_standbys(self) -> list[str]:
        """The application names of the primary's synchronous (quorum) standbys."""
        with psycopg.connect(self.node_url(self.primary()), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute("SELECT application_name FROM pg_stat_replication"
                                " WHERE sync_state IN ('sync', 'quorum') ORDER BY 1").fetchall()
        return [str(r[0]) for r in rows]


class TcpProxy:
    """Forwards 127.0.0.1:port to TARGET_PORT on one thread; `cut()` stops moving bytes both ways (nothing is
    closed: a partition, not a crash) and stops accepting, `heal()` resumes."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._peers: dict[socket.socket, socket.socket] = {}
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    def url_for(self, url: str) -> str:
        """URL with its 127.0.0.1 port replaced by this proxy's."""
        return url.replace(f"127.0.0.1:{self.target_port}", f"127.0.0.1:{self.port}")

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in [*self._peers, self._listener]:
            sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._cut.is_set():
                time.sleep(0.02)
                continue
            for key, _ in self._selector.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock in self._peers:
                    self._forward(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ)
        self._peers[client], self._peers[server] = server, client

    def _forward(self, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(65536)
            if data:
                peer.sendall(data)
                return
        except OSError:
            pass
        for each in (sock, peer):  # one side closed: close the other, as a TCP proxy does
            self._selector.unregister(each)
            self._peers.pop(each, None)
            each.close()


@dataclass
class HttpAnswer:
    """A `requests` answer in the shape the Stack's helpers read (Flask's test response: `.json`, `get_data`)."""

    status_code: int
    json: Any
    text: str

    def get_data(self, as_text: bool = False) -> str:
        return self.text


@dataclass
class ClusterStack(Stack):
    """A fault-test Stack whose user and admin calls go to the real `relay api` replicas in API_URLS (the first
    that answers), so "readable through the API" means through them, across their restarts and failovers."""

    api_urls: list[str] = field(default_factory=list)
    http: requests.Session = field(default_factory=requests.Session)

    def call(self, key: str, method: str, path: str, **kwargs: Any) -> Any:
        if not self.api_urls:
            return super().call(key, method, path, **kwargs)
        return self._http(method, path, {"Authorization": f"Bearer {key}"}, **kwargs)

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        if not self.api_urls:
            return super().admin(method, path, **kwargs)
        return self._http(method, path, {"Authorization": f"Bearer {self.settings.admin_token}"}, **kwargs)

    def start_apis(self, count: int = 2) -> list[RelayProcess]:
        apis = [self.start_api() for _ in range(count)]
        self.api_urls = [api.url for api in apis]
        return apis

    def _http(self, method: str, path: str, headers: dict[str, str], **kwargs: Any) -> HttpAnswer:
        headers = {**headers, **kwargs.pop("headers", {})}
        params = kwargs.pop("query_string", None)
        error: Exception | None = None
        for base in self.api_urls:
            try:
                res = self.http.request(method, base + path, headers=headers, params=params, timeout=30, **kwargs)
            except requests.ConnectionError as exc:  # that replica is restarting: ask the next
                error = exc
                continue
            try:
                body = res.json()
            except ValueError:
                body = None
            return HttpAnswer(res.status_code, body, res.text)
        raise AssertionError(f"no API replica answered {method} {path}: {error}")


def finish_times(stack: Stack, batch_id: str) -> list[float]:
    """Epoch seconds at which each final item of the batch became final, in order."""
    with stack.runtime.pool.connection() as conn:
        rows = conn.execute("SELECT extract(epoch FROM finished_at) AS t FROM batch_items WHERE batch_id = %s"
                            " AND finished_at IS NOT NULL ORDER BY finished_at", (batch_id,)).fetchall()
    return [float(r["t"]) for r in rows]  # type: ignore[call-overload]


def db_now(stack: Stack) -> float:
    """The database's clock (epoch seconds): fault times comparable with finished_at."""
    return float(stack.db_one("SELECT extract(epoch FROM clock_timestamp()) AS t")["t"])


def resume_after(times: list[float], fault_at: float, window_s: float = 1.0, share: float = 0.5) -> float:
    """Seconds from FAULT_AT until items finish again at SHARE of the rate before it: the end of the first
    WINDOW_S-long window after the fault holding that many finishes (inf when the drain never got back)."""
    before = [t for t in times if fault_at - 3.0 <= t < fault_at]
    rate = len(before) / 3.0
    needed = max(1, int(rate * window_s * share))
    after = [t for t in times if t >= fault_at]
    for i in range(len(after) - needed + 1):
        if after[i + needed - 1] - after[i] <= window_s:
            return max(after[i + needed - 1] - fault_at, 0.0)
    return float("inf")


def longest_gap(times: list[float], start: float) -> float:
    """The longest time after START without an item becoming final (up to the last one)."""
    marks = [start, *(t for t in times if t >= start)]
    return max((b - a for a, b in itertools.pairwise(marks)), default=0.0)
