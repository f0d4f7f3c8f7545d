"""A whole Relay for fault tests: its own database and RabbitMQ vhost (or private services), a catalog on a fake
upstream running as its own process, relay keys, worker processes, and the checks every fault test ends with."""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flask import Flask

from app.runtime import Runtime
from app.settings import Settings
from devtools.fake_upstream.harness import FakeUpstream
from devtools.processes import RelayProcess, start_api, start_workers, tcp_sockets
from devtools.services import fresh_services

# Worker settings for fault tests: liveness noticed within seconds, items stopped after 10 s.
FAULT_WORKER_SETTINGS = {"batch_item_time_limit_s": 10, "worker_heartbeat_s": 0.5, "worker_lost_after_s": 5}
SCENARIOS = ("kill", "term", "rabbitmq", "postgres", "api", "hang", "reset", "disk", "paced-kill", "paced-rabbitmq",
             "dbdrop", "freeze", "pause")
# The paced scenarios' policy: 200 items per 2 s window for batch items (half of 400), slower than the workers.
PACED = {"rate_limits": [{"requests": 400, "per": "2s"}], "batch": {"pace": True, "share": 0.5}}
POLICY_EXTRAS: dict[str, dict[str, Any]] = {
    "paced-kill": PACED, "paced-rabbitmq": PACED,
    "dbdrop": {"rate_limits": [{"requests": 1_000_000, "tokens": 1_000_000_000, "per": "60s"}]}}
MODEL = "gpt-4o-mini"


def fault_catalog(upstream_url: str, scenarios: tuple[str, ...] = SCENARIOS) -> dict[str, Any]:
    """One `openai` host; one host key and one policy per scenario, so each test's upstream calls are its own."""
    return {
        "hosts": [{"name": "openai", "base_url": upstream_url,
                   "keys": [{"name": f"k-{s}", "value": upstream_key(s)} for s in scenarios]}],
        "models": [{"name": MODEL, "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": "gpt-4o-mini",
                                                 "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}}]}],
        "policies": [{"name": s, "models": ["*"], "key_pool": [f"k-{s}"],
                      "circuit_breaker": {"failures": 10000, "cooldown": "1s"},
                      **POLICY_EXTRAS.get(s, {})} for s in scenarios],
        "teams": [{"name": "t-faults"}],
        "projects": [{"name": "p-faults", "team": "t-faults"}],
        "service_accounts": [{"name": "faults-svc", "policy": scenarios[0], "project": "p-faults",
                              "team": "t-faults"}],
    }


def upstream_key(scenario: str) -> str:
    return f"sk-fault-{scenario}"


def item_requests(tag: str, count: int) -> list[dict[str, Any]]:
    """COUNT chat requests whose message text is unique ("<tag>-item-<idx>"), so upstream calls can be matched."""
    return [{"model": MODEL, "messages": [{"role": "user", "content": f"{tag}-item-{idx}"}]} for idx in range(count)]


@dataclass
class Accounting:
    """What a finished batch looked like: its items by idx and the upstream calls per item."""

    batch: dict[str, Any]
    items: dict[int, dict[str, Any]]
    calls: Counter[int] = field(default_factory=Counter)

    def states(self) -> Counter[str]:
        return Counter(item["state"] for item in self.items.values())

    def error_codes(self) -> Counter[str | None]:
        return Counter(item["error_code"] for item in self.items.values() if item["state"] != "completed")


@dataclass
class Stack:
    settings: Settings
    env: dict[str, str]
    runtime: Runtime
    app: Flask
    upstream: FakeUpstream
    logs: Path
    processes: list[RelayProcess] = field(default_factory=list)

    @classmethod
    def build(cls, *, database_url: str, broker_url: str, upstream: FakeUpstream, workdir: Path,
              queue_name: str, catalog: dict[str, Any] | None = None, **settings: Any) -> Stack:
        payloads = workdir / "payloads"
        logs = workdir / "logs"
        payloads.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        config = Settings(database_url=database_url, broker_url=broker_url,
                          admin_token="fault-admin-" + secrets.token_hex(16),
                          secret_key="fault-secret-" + secrets.token_hex(16), batch_payload_dir=str(payloads),
                          queue_name=queue_name, **settings)
        env = settings_env(config)
        runtime = Runtime.build(config)
        from app.api.factory import create_app

        stack = cls(settings=config, env=env, runtime=runtime, app=create_app(runtime=runtime), upstream=upstream,
                    logs=logs)
        res = stack.admin("PUT", "/admin/catalog", json=catalog or fault_catalog(upstream.url))
        assert res.status_code == 200, res.get_data(as_text=True)
        return stack

    @classmethod
    def on_own_services(cls, suffix: str, *, upstream: FakeUpstream, workdir: Path,
                        catalog: dict[str, Any] | None = None, **settings: Any) -> Stack:
        """A stack on a database and RabbitMQ vhost of its own (`<RELAY_TEST_DB>_<SUFFIX>`) of the shared services,
        so its catalog replaces nobody's; SETTINGS as Stack.build takes them."""
        name = os.environ.get("RELAY_TEST_DB", "relay_test") + "_" + suffix
        own = fresh_services(name)
        return cls.build(database_url=own.database_url, broker_url=own.broker_url, upstream=upstream,
                         workdir=workdir, queue_name=f"relay.batch_items.{name}", catalog=catalog, **settings)

    def close(self) -> None:
        self.stop_processes()
        self.runtime.close()

    def stop_processes(self) -> None:
        """Kill every process this stack started and settle what a failed test left unfinished, so nothing
        runs into the next test."""
        while self.processes:
            self.processes.pop().stop(signal.SIGKILL)
        with self.runtime.pool.connection() as conn:
            conn.execute("UPDATE batches SET status = 'cancelled' WHERE finished_at IS NULL")
            conn.execute("UPDATE batch_items SET state = 'cancelled', finished_at = now()"
                         " WHERE state IN ('queued', 'running')")

    def worker_process(self, workers: RelayProcess, timeout: float = 30) -> tuple[int, str]:
        """The pid and worker id of the Dramatiq worker process under `relay worker -p 1` WORKERS."""
        deadline = time.monotonic() + timeout
        while True:
            children = [int(p) for p in
                        Path(f"/proc/{workers.proc.pid}/task/{workers.proc.pid}/children").read_text().split()]
            with self.runtime.pool.connection() as conn:
                row = conn.execute("SELECT id, pid FROM workers WHERE pid = ANY(%s) ORDER BY started_at DESC"
                                   " LIMIT 1", (children,)).fetchone()
            if row is not None:
                return int(row["pid"]), str(row["id"])  # type: ignore[call-overload]
            if time.monotonic() > deadline:
                raise AssertionError(f"no worker process found under pid {workers.proc.pid}")
            time.sleep(0.1)

    # -- the API -------------------------------------------------------------------------------------------
    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.settings.admin_token}", **kwargs.pop("headers", {})}
        return self.app.test_client().open(path, method=method, headers=headers, **kwargs)

    def new_key(self, scenario: str) -> str:
        return str(self.new_key_record(scenario)["key"])

    def new_key_record(self, scenario: str) -> dict[str, Any]:
        """A new relay key under the scenario's policy: the admin API's answer (`key` is the secret, `id`)."""
        res = self.admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                            "principal": "faults-svc", "policy": scenario})
        assert res.status_code == 201, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    def start_api(self, port: int = 0, **overrides: Any) -> RelayProcess:
        """A real `relay api` (gunicorn, one worker) with RELAY_* OVERRIDES, on PORT (by default one the OS picks,
        read back; a PORT for an API a test restarts on the same address)."""
        env = {**self.env, **{"RELAY_" + k.upper(): str(v) for k, v in overrides.items()}}
        api = start_api(env, self.logs, workers=1, port=port)
        self.processes.append(api)
        return api

    def call(self, key: str, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
        return self.app.test_client().open(path, method=method, headers=headers, **kwargs)

    def submit(self, key: str, tag: str, count: int) -> str:
        res = self.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": item_requests(tag, count)})
        assert res.status_code == 202, res.get_data(as_text=True)
        return str(res.json["id"])

    def read(self, key: str, batch_id: str, **params: Any) -> dict[str, Any]:
        res = self.call(key, "GET", f"/v1/batches/{batch_id}", query_string=params)
        assert res.status_code == 200, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    # -- processes -----------------------------------------------------------------------------------------
    def start_worker(self, threads: int = 8, **overrides: Any) -> RelayProcess:
        """One `relay worker -p 1` (its main process and one Dramatiq worker process), ready to take items."""
        proc = start_workers(self.env, self.logs, self.runtime, processes=1, threads=threads,
                             **{**FAULT_WORKER_SETTINGS, **overrides})
        self.processes.append(proc)
        return proc

    # -- progress and checks -------------------------------------------------------------------------------
    def db_one(self, sql: str, *params: Any) -> dict[str, Any]:
        with self.runtime.pool.connection() as conn:
            row = conn.execute(sql, params).fetchone()
        assert row is not None
        return dict(row)

    def count_items(self, batch_id: str, *states: str) -> int:
        return int(self.db_one("SELECT count(*) AS n FROM batch_items WHERE batch_id = %s AND state = ANY(%s)",
                               batch_id, list(states))["n"])

    def item_rows(self, batch_id: str, where: str, *params: Any) -> list[dict[str, Any]]:
        """Items of the batch (idx, state, error_code, worker_id, started_at) matching the SQL condition WHERE."""
        with self.runtime.pool.connection() as conn:
            rows = conn.execute("SELECT idx, state, error_code, worker_id, started_at, published_at FROM batch_items"
                                f" WHERE batch_id = %s AND ({where}) ORDER BY idx", (batch_id, *params)).fetchall()
        return [dict(r) for r in rows]

    def wait_for_running(self, batch_id: str, worker_id: str, timeout: float = 30) -> None:
        """Wait until WORKER_ID runs at least one item of the batch."""
        deadline = time.monotonic() + timeout
        while not self.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id):
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {worker_id} runs no item of {batch_id}")
            time.sleep(0.02)

    def end_sessions(self, pid: int) -> int:
        """End every Postgres session of process PID (as a host that is gone loses them all: its heartbeat's, and
        a pooled one stopped mid-transaction holding its items' rows); how many."""
        ports = {port for port, _ in tcp_sockets(pid)}
        with self.runtime.pool.connection() as conn:
            rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY(%s)"
                                " AND client_addr IN ('127.0.0.1', '::1')", (sorted(ports),)).fetchall()
        return len(rows)

    def wait_items(self, batch_id: str, states: tuple[str, ...], at_least: int, timeout: float = 60) -> int:
        """Wait until at least AT_LEAST items of the batch are in one of STATES."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.count_items(batch_id, *states)
            if n >= at_least:
                return n
            if time.monotonic() > deadline:
                raise AssertionError(f"only {n} items {states} after {timeout}s (wanted {at_least})")
            time.sleep(0.05)

    def wait_finished(self, key: str, batch_id: str, timeout: float = 120) -> dict[str, Any]:
        """Poll the API until the batch says finished (a bounded wait)."""
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            res = self.call(key, "GET", f"/v1/batches/{batch_id}", query_string={"limit": 0})
            if res.status_code == 200:
                body = res.json
                if body["finished"]:
                    return body
            time.sleep(0.2)
        raise AssertionError(f"batch {batch_id} not finished after {timeout}s: {body.get('counts')}")

    def account(self, key: str, batch_id: str, tag: str, total: int, timeout: float = 120) -> Accounting:
        """Wait for the batch to finish, then check the promises every fault test makes:
        every item final, exactly one usage event per item, no item sent to the upstream twice,
        a completed item sent exactly once, and the whole batch readable (items and results) through the API."""
        batch = self.wait_finished(key, batch_id, timeout)
        assert batch["total"] == total
        assert batch["counts"]["queued"] == 0 and batch["counts"]["running"] == 0, batch["counts"]
        assert sum(batch["counts"].values()) == total

        usage = self.db_one("SELECT count(*) AS n, count(DISTINCT batch_idx) AS idxs FROM usage_events"
                            " WHERE batch_id = %s", batch_id)
        assert (usage["n"], usage["idxs"]) == (total, total), usage

        items = self.all_items(key, batch_id)
        assert sorted(items) == list(range(total))
        assert all(item["state"] in ("completed", "discarded", "cancelled") for item in items.values())

        calls = self.upstream_calls(tag)
        twice = {idx: n for idx, n in calls.items() if n > 1}
        assert not twice, f"items sent to the upstream more than once: {twice}"
        never = [idx for idx, item in items.items() if item["state"] == "completed" and calls[idx] != 1]
        assert not never, f"completed items without exactly one upstream call: {never[:20]}"

        results = self.results(key, batch_id)
        assert [r["idx"] for r in results] == list(range(total))
        for result in results:
            assert result["state"] == items[result["idx"]]["state"]
            if result["state"] == "completed":
                assert result["response"]["object"] == "chat.completion"
            else:
                assert result["error"]
        accounting = Accounting(batch=batch, items=items, calls=calls)
        print(f"batch {tag}: states {dict(accounting.states())}, errors {dict(accounting.error_codes())},"
              f" upstream calls {sum(calls.values())}")
        return accounting

    def all_items(self, key: str, batch_id: str) -> dict[int, dict[str, Any]]:
        items: dict[int, dict[str, Any]] = {}
        after = -1
        while after is not None:
            page = self.read(key, batch_id, limit=1000, after=after)
            items.update({item["idx"]: item for item in page["items"]})
            after = page["items_next_after"]
        return items

    def results(self, key: str, batch_id: str) -> list[dict[str, Any]]:
        res = self.call(key, "GET", f"/v1/batches/{batch_id}/results")
        assert res.status_code == 200, res.get_data(as_text=True)
        return res.json["results"]  # type: ignore[no-any-return]

    def upstream_calls(self, tag: str) -> Counter[int]:
        """How many times the upstream received each item of the batch tagged TAG (by its unique text)."""
        prefix = f"{tag}-item-"
        calls: Counter[int] = Counter()
        for record in self.upstream.requests(path="/v1/chat/completions"):
            body = record.get("body")
            if not isinstance(body, dict):
                continue
            for message in body.get("messages") or []:
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, str) and content.startswith(prefix):
                    calls[int(content[len(prefix):])] += 1
        return calls


def settings_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    for name, value in settings.__dict__.items():
        env["RELAY_" + name.upper()] = str(value)
    env["RELAY_WORKER_METRICS_PORT"] = "0"  # no metrics server: nothing to collide with on this machine
    return env


def with_settings(stack: Stack, **changes: Any) -> Settings:
    return replace(stack.settings, **changes)

