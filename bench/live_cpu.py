"""The live path's CPU per call, measured in one process: POST /v1/chat/completions through the real Flask app (its
WSGI callable, no HTTP server in front) on the bench's policies, against the fake upstream in a process of its own,
reported in milliseconds of this process's CPU per call (every thread: the usage writer and the lease refills
count), the figure a loaded machine disturbs far less than latency. With --profile, cProfile's costliest functions
over one more round (the calling thread's only).

    .venv/bin/python -m bench.live_cpu --database t_live_cpu [--calls 3000] [--rounds 3] [--policy real] [--profile 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from flask import Flask
from werkzeug.test import EnvironBuilder

from bench.env import catalog, item_body
from bench.sizes import FULL
from devtools.fake_upstream.harness import start_fake_upstream
from devtools.services import fresh_services

WARMUP_CALLS = 200


class LiveCall:
    """One live call, its WSGI environ built once: each call() runs it through the app and checks the answer."""

    def __init__(self, app: Flask, key: str, body: bytes) -> None:
        self.app, self.body = app, body
        self.environ = EnvironBuilder(path="/v1/chat/completions", method="POST", data=body,
                                      headers={"Authorization": f"Bearer {key}",
                                               "content-type": "application/json"}).get_environ()
        self.status = ""

    def _start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        self.status = status

    def __call__(self) -> bytes:
        environ = {**self.environ, "wsgi.input": io.BytesIO(self.body)}
        answer = self.app(environ, self._start_response)
        try:
            content = b"".join(answer)
        finally:
            getattr(answer, "close", lambda: None)()
        if not self.status.startswith("200"):
            raise RuntimeError(f"the live call answered {self.status}: {content[:300]!r}")
        return content


class Round(NamedTuple):
    """Milliseconds per call of a round: this process's CPU, the calling thread's part of it, and wall time."""

    cpu: float
    thread: float
    wall: float


def cpu_per_call(call: LiveCall, calls: int) -> Round:
    """The CPU and wall time per call of CALLS calls."""
    wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(calls):
        call()
    return Round((time.process_time() - cpu) * 1000 / calls, (time.thread_time() - thread) * 1000 / calls,
                 (time.perf_counter() - wall) * 1000 / calls)


def profile(call: LiveCall, calls: int, top: int) -> str:
    """cProfile's TOP functions by own time, then by cumulative time, over CALLS calls, in this thread's CPU time
    (not wall time: a wait on the upstream or on the machine's other processes counts nothing)."""
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    out = io.StringIO()
    out.write(f"{sum(row[1] for row in profiler.getstats()) / calls:.0f} Python function calls per call\n")
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


@contextmanager
def live_app(database: str, policy: str) -> Iterator[LiveCall]:
    """The Flask app on a fresh DATABASE, the bench's catalog on a fake upstream process, and a live call as a
    relay key of POLICY."""
    from app.api.factory import create_app
    from app.runtime import Runtime
    from app.settings import Settings

    services = fresh_services(database)
    upstream = start_fake_upstream(process=True)
    upstream.settings(request_log_size=10)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(database_url=services.database_url, broker_url=services.broker_url,
                            admin_token="bench-" + "a" * 32, secret_key="bench-" + "s" * 32,
                            batch_payload_dir=f"{folder}/payloads")
        runtime = Runtime.build(settings)
        try:
            app = create_app(runtime=runtime)
            key = _relay_key(app, settings.admin_token, upstream.url, policy)
            yield LiveCall(app, key, json.dumps(item_body(0)).encode())
        finally:
            runtime.close()
            upstream.stop()


def _relay_key(app: Flask, admin_token: str, upstream_url: str, policy: str) -> str:
    """The bench's catalog applied through the admin API, and a new relay key of POLICY."""
    client, auth = app.test_client(), {"Authorization": f"Bearer {admin_token}"}
    applied = client.put("/admin/catalog", json=catalog(upstream_url, FULL), headers=auth)
    made = client.post("/admin/relay-keys", headers=auth,
                       json={"principal_kind": "service_account", "principal": "bench", "policy": policy})
    for answer in (applied, made):
        if answer.status_code >= 300:
            raise RuntimeError(f"the admin API answered {answer.status_code}: {answer.get_data(as_text=True)}")
    return str(made.get_json()["key"])


def measure(database: str, policy: str, calls: int, rounds: int, top: int,
            report: Callable[[str], None] = print) -> list[float]:
    """Milliseconds of CPU per call of each round (REPORTed as it ends), then the profile of TOP functions."""
    with live_app(database, policy) as call:
        for _ in range(WARMUP_CALLS):
            call()
        cpus = []
        for _ in range(rounds):
            got = cpu_per_call(call, calls)
            cpus.append(got.cpu)
            report(f"{calls} calls: {got.cpu:.3f} ms of CPU per call ({got.thread:.3f} in the calling thread, the"
                   f" rest in the usage writer's and the leases'), {got.wall:.3f} ms of wall time")
        report(f"median: {statistics.median(cpus):.3f} ms of CPU per call, best {min(cpus):.3f} ms ({policy} policy;"
               " the best round is the one the machine's other processes disturbed least)")
        if top:
            report(profile(call, calls, top))
    return cpus


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", required=True, help="its own database and vhost (dropped and made again)")
    parser.add_argument("--calls", type=int, default=3000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policy", default="real", help="the bench policy (real: the acceptance policy; fast: bare)")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP", help="also profile a round: TOP functions")
    args = parser.parse_args(argv)
    from app.observability.logs import install_json_logging
    from app.observability.metrics import prepare_metrics_dir

    install_json_logging(logging.INFO)  # as `relay api` runs: JSON logs at INFO, multi-process metrics
    with tempfile.TemporaryDirectory() as folder:
        prepare_metrics_dir(folder)
        measure(args.database, args.policy, args.calls, args.rounds, args.profile,
                lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
