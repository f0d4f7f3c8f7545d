"""The benchmark environment: its own database and vhost, a fake upstream process, a catalog, relay keys, and
real `relay api` / `relay worker` processes started and stopped by the scenarios."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import requests

from bench import sysstat
from bench.sizes import Sizes
from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_api, start_relay
from devtools.services import ServiceUrls, ensure_services, fresh_services
from schemas.batches import FINAL_STATES

MODEL = "gpt-4o-mini"
TRICKLE_REPLY = "word " * 100  # streamed a couple of words at a time, CHUNK_DELAY_MS apart: a stream that lasts
CHUNK_DELAY_MS = 50
BIG_REPLY = "x" * 8_000_000  # one 8 MB delta: more than the sockets' buffers hold, so a gateway's write blocks
FINAL = FINAL_STATES
# Host keys by behaviour (latencies are set on the fake upstream per key).
SERVICES_DIR = Path(os.environ.get("RELAY_SERVICES_DIR", Path(__file__).resolve().parent.parent / ".services"))
WORK_ROOT = Path(__file__).resolve().parent / "results"  # git-ignored; payload files on the project's disk
KEYS = {"fast": "sk-bench-fast", "slow": "sk-bench-slow", "hang": "sk-bench-hang", "trickle": "sk-bench-trickle",
        "big": "sk-bench-big", "fair": "sk-bench-fair", "fast-2": "sk-bench-fast-2", "slow-2": "sk-bench-slow-2",
        "paced": "sk-bench-paced", "rps": "sk-bench-rps", "soak": "sk-bench-soak"}
POLICIES = ("fast", "slow", "hang", "limited", "trickle", "big", "fair", "real", "real-slow", "paced", "rps",
            "soak")


def item_body(i: int, size: int = 1024) -> dict[str, Any]:
    """One openai chat request of about SIZE bytes as JSON; the fake upstream echoes 64 characters back."""
    text = f"item {i}: " + "lorem ipsum dolor sit amet " * 40
    room = size - len(json.dumps({"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": ""}]}))
    return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": text[:max(1, room)]}]}


def batch_body(count: int) -> tuple[bytes, list[bytes]]:
    """A POST /v1/batches body of COUNT ~1 KB openai items, and each item's bytes."""
    items = [json.dumps(item_body(i)).encode() for i in range(count)]
    return b'{"shape":"openai","metadata":{"bench":true},"requests":[' + b",".join(items) + b"]}", items


@dataclass(frozen=True)
class Peer:
    """A peer gateway started with --peer: its base URL, the key its callers send, the headers they send besides
    (Portkey's routing), and whether the slow-clients scenario knows its health path and slow models."""

    url: str
    key: str
    headers: dict[str, str] = field(default_factory=dict)
    slow_clients: bool = True


@dataclass
class BenchEnv:
    """Everything a scenario needs; `close()` stops the processes and drops the scratch database."""

    name: str
    services: ServiceUrls
    env: dict[str, str]
    work: Path
    upstream: FakeUpstream
    conn: psycopg.Connection[Any]
    keys: dict[str, str] = field(default_factory=dict)  # policy name -> relay key
    api: RelayProcess | None = None
    workers: RelayProcess | None = None
    http: requests.Session = field(default_factory=requests.Session)
    peers: dict[str, Peer] = field(default_factory=dict)  # peer gateways started with --peer, by name

    @classmethod
    def create(cls, sizes: Sizes, name: str = "relay_bench") -> BenchEnv:
        """Fresh database + vhost NAME, fake upstream, payload dir, catalog and one relay key per policy."""
        ensure_services()
        services = fresh_services(name)
        WORK_ROOT.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="work-", dir=WORK_ROOT))
        upstream = start_fake_upstream(process=True)
        upstream.settings(request_log_size=10)  # keep the fake upstream light
        upstream.control(KEYS["slow"], latency_ms=sizes.slow_latency_ms)
        upstream.control(KEYS["slow-2"], latency_ms=sizes.slow_latency_ms)
        upstream.control(KEYS["rps"], max_rps=sizes.rps_key_limit)
        upstream.control(KEYS["hang"], latency_ms=120_000)
        upstream.control(KEYS["trickle"], reply=TRICKLE_REPLY, chunk_delay_ms=CHUNK_DELAY_MS)
        upstream.control(KEYS["big"], reply=BIG_REPLY)
        upstream.control(KEYS["fair"], latency_ms=sizes.fair_latency_ms)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RELAY_DATABASE_URL": services.database_url,
               "RELAY_BROKER_URL": services.broker_url, "RELAY_ADMIN_TOKEN": "bench-admin-" + secrets.token_hex(12),
               "RELAY_SECRET_KEY": "bench-secret-" + secrets.token_hex(12),
               "RELAY_BATCH_PAYLOAD_DIR": str(work / "payloads"), "RELAY_WORKER_METRICS_PORT": "0",
               # ^ no workers' metrics server: a port chosen here could be taken by the time a worker binds it
               "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics")}
        env.pop("RELAY_WORKER_ID", None)
        conn = psycopg.connect(services.database_url, autocommit=True)
        bench = cls(name=name, services=services, env=env, work=work, upstream=upstream, conn=conn)
        bench.start_api()
        bench._apply_catalog(catalog(upstream.url, sizes))
        return bench

    def close(self) -> None:
        for proc in (self.workers, self.api):
            if proc is not None:
                proc.stop()
        self.upstream.stop()
        self.conn.close()
        self.http.close()
        shutil.rmtree(self.work, ignore_errors=True)
        with psycopg.connect(self.services.database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        requests.delete(f"{self.services.mq_api}/vhosts/{self.name}", auth=("guest", "guest"), timeout=30)

    # processes -------------------------------------------------------------------------------------------------

    def start_api(self, workers: int = 2, **overrides: Any) -> RelayProcess:
        """`relay api --workers WORKERS`, with RELAY_* OVERRIDES (e.g. api_io_timeout_s=1)."""
        if self.api is not None:
            self.api.stop()
        env = {**self.env, **{"RELAY_" + k.upper(): str(v) for k, v in overrides.items()}}
        self.api = start_api(env, self.work, workers=workers)
        return self.api

    @property
    def api_url(self) -> str:
        assert self.api is not None
        return self.api.url

    def api_workers(self) -> list[int]:
        """The gunicorn worker pids (the children of the master)."""
        assert self.api is not None
        return [p for p in sysstat.descendants(self.api.proc.pid) if p != self.api.proc.pid]

    def start_workers(self, processes: int = 2, threads: int = 16, extra: tuple[str, ...] = (),
                      **overrides: Any) -> RelayProcess:
        """`relay worker -p PROCESSES -t THREADS`; returns once every process heartbeats."""
        self.stop_workers()
        env = {**self.env, **{"RELAY_" + k.upper(): str(v) for k, v in overrides.items()}}
        before = self.conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        self.workers = start_relay(["worker", "-p", str(processes), "-t", str(threads), *extra], env,
                                   self.work / f"worker-{time.monotonic_ns()}.log")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.workers.proc.poll() is not None:
                raise RuntimeError(f"relay worker exited early:\n{self.workers.log()[-3000:]}")
            row = self.conn.execute("SELECT count(*) FROM workers WHERE started_at >= %s", (before,)).fetchone()
            if row and row[0] >= processes:
                return self.workers
            time.sleep(0.1)
        raise RuntimeError(f"relay worker did not start:\n{self.workers.log()[-3000:]}")

    def stop_workers(self) -> None:
        if self.workers is not None:
            self.workers.stop()
            self.workers = None
            self.conn.execute("DELETE FROM workers")

    def relay_pids(self) -> list[int]:
        pids = []
        for proc in (self.api, self.workers):
            if proc is not None:
                pids += sysstat.descendants(proc.proc.pid)
        return pids

    def cpu_sample(self) -> dict[str, dict[int, float]]:
        """CPU seconds per pid of Relay's processes, Postgres (this database + background) and RabbitMQ."""
        return {"relay": sysstat.cpu_seconds(self.relay_pids()),
                "postgres": sysstat.cpu_seconds(sysstat.postgres_pids(self.conn, self.name)),
                "rabbitmq": sysstat.cpu_seconds(sysstat.rabbitmq_pids(SERVICES_DIR))}

    # batches ---------------------------------------------------------------------------------------------------

    def post_batch(self, policy: str, body: bytes, key: str | None = None) -> tuple[str, float]:
        """POST a batch body as the relay key of POLICY (or KEY); (batch id, seconds until the 202)."""
        assert self.api is not None
        started = time.perf_counter()
        res = self.http.post(self.api.url + "/v1/batches", data=body, timeout=600,
                             headers={"Authorization": f"Bearer {key or self.keys[policy]}",
                                      "content-type": "application/json"})
        took = time.perf_counter() - started
        if res.status_code != 202:
            raise RuntimeError(f"submit answered {res.status_code}: {res.text[:500]}")
        return str(res.json()["id"]), took

    def final_count(self, batch_id: str) -> int:
        """Items of the batch in a final state, from its progress counters (a count of its items, polled, would add
        a scan of the batch to the Postgres CPU the drain rows measure)."""
        row = self.conn.execute("SELECT coalesce(sum(completed + discarded + cancelled), 0) FROM batch_progress"
                                " WHERE batch_id = %s", (batch_id,)).fetchone()
        return int(row[0]) if row else 0

    def wait_final(self, batch_id: str, total: int, timeout: float = 900.0, poll: float = 0.25) -> None:
        """Poll until every item of the batch is final."""
        deadline = time.monotonic() + timeout
        while self.final_count(batch_id) < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"batch {batch_id} not drained after {timeout:.0f}s")
            if self.workers is not None and self.workers.proc.poll() is not None:
                raise RuntimeError(f"relay worker died:\n{self.workers.log()[-3000:]}")
            time.sleep(poll)

    def last_finished(self, batch_id: str) -> float:
        """Epoch seconds of the batch's last item to become final."""
        row = self.conn.execute("SELECT extract(epoch FROM max(finished_at)) FROM batch_items WHERE batch_id = %s",
                                (batch_id,)).fetchone()
        return float(row[0]) if row and row[0] is not None else time.time()

    def forget_batch(self, batch_id: str) -> None:
        """Delete a measured batch (rows, usage events, files) so the next run starts from the same state."""
        self.conn.execute("DELETE FROM usage_events WHERE batch_id = %s", (batch_id,))
        self.conn.execute("DELETE FROM batch_items WHERE batch_id = %s", (batch_id,))
        self.conn.execute("DELETE FROM batches WHERE id = %s", (batch_id,))
        shutil.rmtree(self.work / "payloads" / batch_id, ignore_errors=True)

    # setup -----------------------------------------------------------------------------------------------------

    def _apply_catalog(self, doc: dict[str, Any]) -> None:
        assert self.api is not None
        auth = {"Authorization": f"Bearer {self.env['RELAY_ADMIN_TOKEN']}"}
        res = self.http.put(self.api.url + "/admin/catalog", json=doc,
                            headers=auth, timeout=60)
        res.raise_for_status()
        for policy in POLICIES:
            self.keys[policy] = self.new_key(policy, wait=False)
        self._wait_catalog()

    def new_key(self, policy: str, wait: bool = True) -> str:
        """A new relay key of POLICY: another owner of batches (fair share is per credential)."""
        assert self.api is not None
        res = self.http.post(self.api.url + "/admin/relay-keys", timeout=60,
                             headers={"Authorization": f"Bearer {self.env['RELAY_ADMIN_TOKEN']}"},
                             json={"principal_kind": "service_account", "principal": "bench", "policy": policy})
        res.raise_for_status()
        key = str(res.json()["key"])
        if wait:
            self._wait_catalog([key])
        return key

    def _wait_catalog(self, keys: list[str] | None = None) -> None:
        """Every API worker sees the new KEYS (default all; the catalog cache refreshes within a second)."""
        assert self.api is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ok = all(self.http.get(self.api.url + "/v1/models", timeout=10,
                                   headers={"Authorization": f"Bearer {k}"}).status_code == 200
                     for k in (keys or list(self.keys.values())) for _ in range(4))
            if ok:
                return
            time.sleep(0.2)


def real_policy(name: str, keys: list[str]) -> dict[str, Any]:
    """A policy as users write them (docs/catalog.example.yaml): a request and a token limit per minute and a daily
    request limit (none of which the bench reaches), two keys in prioritized order with a breaker."""
    return {"name": name, "models": ["gpt-*"], "key_pool": keys, "key_selection": "prioritized",
            "circuit_breaker": {"failures": 3, "cooldown": "30s"},
            "rate_limits": [{"requests": 10_000_000, "tokens": 10_000_000_000, "per": "60s"},
                            {"requests": 100_000_000, "per": "24h"}]}


def catalog(upstream_url: str, sizes: Sizes) -> dict[str, Any]:
    """One openai host on the fake upstream, a key per behaviour, one policy per scenario: bare ones (no limit,
    one key) and real ones (real_policy)."""
    breaker = {"failures": 1000, "cooldown": "1s"}
    bare = [{"name": name, "models": ["*"], "key_pool": [name], "circuit_breaker": breaker}
            for name in ("fast", "slow", "hang", "trickle", "big", "fair")]
    return {
        "hosts": [{"name": "openai", "base_url": upstream_url,
                   "keys": [{"name": name, "value": value} for name, value in KEYS.items()]}],
        "models": [{"name": MODEL, "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": MODEL,
                                                 "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}}]}],
        "policies": [
            *bare,
            {"name": "limited", "models": ["*"], "key_pool": ["fast"], "circuit_breaker": breaker,
             "rate_limits": [{"requests": sizes.rate_limit, "per": f"{sizes.rate_window_s}s"}]},
            real_policy("real", ["fast", "fast-2"]),
            real_policy("real-slow", ["slow", "slow-2"]),
            real_policy("soak", ["soak"]),
            {"name": "paced", "models": ["*"], "key_pool": ["paced"], "circuit_breaker": breaker,
             "rate_limits": [{"requests": sizes.paced_limit, "per": f"{sizes.paced_window_s}s"}],
             "batch": {"pace": True, "share": sizes.paced_share}},
            {"name": "rps", "models": ["*"], "key_pool": ["rps"], "circuit_breaker": breaker},
        ],
        "teams": [{"name": "bench"}],
        "projects": [{"name": "bench", "team": "bench"}],
        "service_accounts": [{"name": "bench", "policy": "fast", "project": "bench", "team": "bench"}],
    }


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")
