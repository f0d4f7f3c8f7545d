"""Prometheus metrics: counters and histograms recorded in-process, plus state read from Postgres and RabbitMQ
at scrape time (app/metrics_scrape.py).

gunicorn and Dramatiq run several processes, so the recorded metrics use prometheus_client's multiprocess
mode: `prepare_metrics_dir()` runs once in the parent before it forks (it empties the directory and points
PROMETHEUS_MULTIPROC_DIR at it) and every scrape merges the files of all children. Without it (tests, a single
process) the metrics live in this process's default registry. Metric objects are built on first use, never
at import, because prometheus_client picks the single- or multi-process value class when a metric is built.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask, Response
    from prometheus_client import CollectorRegistry

    from app.runtime import Runtime

log = logging.getLogger("relay.metrics")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
TEMP_PREFIX = "relay-metrics-"  # + the creating process's pid + "-": a directory made when none is configured
WORKER_PORT_ENV = "RELAY_WORKER_METRICS_PORT"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

_lock = threading.Lock()
_metrics: _Metrics | None = None


class _Metrics:
    """The recorded metrics; one set per process."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.http_requests = Counter("relay_http_requests", "HTTP requests answered, by route template and status",
                                     ["method", "route", "status"])
        self.http_duration = Histogram("relay_http_request_duration_seconds",
                                       "Time to answer an HTTP request (streams: until the body is sent)",
                                       ["method", "route"], buckets=LATENCY_BUCKETS)
        self.upstream_duration = Histogram("relay_upstream_request_duration_seconds",
                                           "Upstream (provider) call latency by host and upstream status",
                                           ["host", "status"], buckets=LATENCY_BUCKETS)
        self.rate_limited = Counter("relay_rate_limited", "Requests and batch items rejected by a rate limit",
                                    ["policy"])
        self.lease_statements = Counter("relay_rate_limit_lease_statements",
                                        "Postgres statements that took or handed back rate-limit slices, by consumer",
                                        ["consumer"])
        self.lease_admitted = Counter("relay_rate_limit_admitted",
                                      "Requests and batch items admitted from rate-limit slices, by consumer",
                                      ["consumer"])
        self.key_backoffs = Counter("relay_upstream_key_backoffs",
                                    "Times a host key's 429 slowed this process's batch calls on it down")
        self.item_duration = Histogram("relay_batch_item_duration_seconds",
                                       "Batch item run time, from start to its final state, by final state",
                                       ["state"], buckets=LATENCY_BUCKETS)
        self.webhook_attempts = Histogram("relay_webhook_attempt_duration_seconds",
                                          "Webhook delivery attempts by outcome (delivered or failed) and their time",
                                          ["outcome"], buckets=LATENCY_BUCKETS)
        self.webhook_deliveries = Counter("relay_webhook_deliveries", "Webhook deliveries that ended, by outcome:"
                                          " delivered, or given_up (failed for good)", ["outcome"])
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *values: str) -> Any:
        """METRIC's child of label VALUES, remembered here: prometheus_client's labels() checks its arguments and
        takes a lock on every call (four times a live call). None is ever removed, so a child stays valid."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found


def metrics() -> _Metrics:
    """This process's metric objects, built on first use."""
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                _metrics = _Metrics()
    return _metrics


def observe_upstream(host: str, status: int | str, seconds: float) -> None:
    """One upstream call to HOST answered STATUS (or e.g. "error" when it never answered) after SECONDS."""
    m = metrics()
    m.child(m.upstream_duration, host, str(status)).observe(seconds)


def count_rate_limited(policy: str) -> None:
    """A request or batch item was rejected by POLICY's rate limit."""
    metrics().rate_limited.labels(policy=policy).inc()


def count_lease_statement(consumer: str) -> None:
    """One rate-limit lease statement (a round trip to Postgres) for CONSUMER (live | batch)."""
    metrics().lease_statements.labels(consumer=consumer).inc()


def count_admitted(consumer: str) -> None:
    """One request or batch item admitted by the rate limiter from a slice held in memory."""
    m = metrics()
    m.child(m.lease_admitted, consumer).inc()


def count_key_backoff() -> None:
    """A host key answered 429: its batch calls here are paced at a lower rate (app/pipeline/backoff.py)."""
    metrics().key_backoffs.inc()


def observe_item(state: str, seconds: float) -> None:
    """A batch item reached final STATE (completed, discarded, cancelled) after running SECONDS."""
    metrics().item_duration.labels(state=state).observe(seconds)


def observe_webhook_attempt(outcome: str, seconds: float) -> None:
    """One webhook delivery attempt ended OUTCOME (delivered | failed) after SECONDS."""
    metrics().webhook_attempts.labels(outcome=outcome).observe(seconds)


def count_webhook_delivery(outcome: str) -> None:
    """A webhook delivery ended for good: delivered or given_up."""
    metrics().webhook_deliveries.labels(outcome=outcome).inc()


def observe_http(method: str, route: str, status: int, seconds: float) -> None:
    """One HTTP request on ROUTE (the URL rule, not the path) answered STATUS after SECONDS."""
    m = metrics()
    m.child(m.http_requests, method, route, str(status)).inc()
    m.child(m.http_duration, method, route).observe(seconds)


def install_request_metrics(app: Flask) -> None:
    """Count and time every request of APP by route template and status (streams: when the body is closed)."""
    from flask import g, request

    @app.before_request
    def _start_request_timer() -> None:
        g.metrics_started = time.perf_counter()

    @app.after_request
    def _count_request(response: Response) -> Response:
        started = g.pop("metrics_started", None)
        if started is not None:
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            method, status = request.method, response.status_code
            if response.is_streamed:  # time the whole stream: record when the server closes the body
                response.call_on_close(lambda: observe_http(method, route, status, time.perf_counter() - started))
            else:
                observe_http(method, route, status, time.perf_counter() - started)
        return response


def prepare_metrics_dir(path: str | None = None) -> str:
    """In the parent, before forking workers: an empty multiprocess directory, exported as PROMETHEUS_MULTIPROC_DIR.

    PATH, else $PROMETHEUS_MULTIPROC_DIR, else a new temporary directory (removed when this process exits).
    Each `relay api` / `relay worker` process group needs its own directory: its files are deleted here.
    """
    chosen = path or os.environ.get(MULTIPROC_ENV) or ""
    if not chosen:
        remove_orphaned_dirs(tempfile.gettempdir())
        chosen = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
        atexit.register(_remove_when_owner_exits, chosen, os.getpid())
    os.makedirs(chosen, exist_ok=True)
    for name in os.listdir(chosen):
        if name.endswith(".db"):
            os.remove(os.path.join(chosen, name))
    os.environ[MULTIPROC_ENV] = chosen
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # decided at import; redo it now the variable is set
    return chosen


def remove_orphaned_dirs(parent: str) -> int:
    """Remove the temporary directories (in PARENT) of this user's processes that are gone without removing theirs
    (killed: atexit never ran); how many. The creator's pid is in the name; a pid that is alive (or reused) keeps
    its directory."""
    removed = 0
    for entry in os.scandir(parent):
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        owner, dash, _ = entry.name.removeprefix(TEMP_PREFIX).partition("-")
        if not (owner.isdigit() and dash) or not entry.is_dir(follow_symlinks=False):
            continue  # the older names (a random suffix, no pid), or not a folder
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
        except OSError:  # alive under another user (EPERM), or the entry went away meanwhile
            continue
    return removed


def _remove_when_owner_exits(directory: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # forked children inherit atexit handlers; only the creator cleans up
        shutil.rmtree(directory, ignore_errors=True)


def multiprocess_dir() -> str | None:
    """The multiprocess directory when this process runs in multiprocess mode."""
    return os.environ.get(MULTIPROC_ENV) or None


def scrape_registry(runtime: Runtime | None) -> CollectorRegistry:
    """A registry for one scrape: every process's recorded metrics plus the state read from Postgres and RabbitMQ."""
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    registry = CollectorRegistry(auto_describe=False)
    directory = multiprocess_dir()
    if directory:
        multiprocess.MultiProcessCollector(registry, path=directory)
    else:
        metrics()  # so the families show up (empty) before anything was recorded
        registry.register(_Forward(REGISTRY))
    if runtime is not None:
        from app.observability.scrape import StateCollector

        registry.register(StateCollector(runtime))
    return registry


def render_metrics(runtime: Runtime | None) -> tuple[bytes, str]:
    """(body, content type) of one scrape in the Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(scrape_registry(runtime)), CONTENT_TYPE_LATEST


class _Forward:
    """A collector that yields another registry's metrics (the default one, in single-process mode)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Any]:
        return self._registry.collect()  # type: ignore[no-any-return]


def check_worker_metrics_port(port: int, host: str) -> None:
    """At `relay worker` start, before any worker process: SettingsError naming the port and the variable when
    another process (another Relay install, say) holds RELAY_WORKER_METRICS_PORT, whose scrapes would then read
    that process's numbers while these workers serve none."""
    from app.settings import SettingsError

    if port <= 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server binds it
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SettingsError(
                f"{WORKER_PORT_ENV}: port {port} on {host} is taken by another process ({exc.strerror}), so these"
                f" workers could serve no metrics there: set {WORKER_PORT_ENV} to a free port (one per Relay"
                " install on a host), or 0 to turn the workers' metrics off") from None


def start_worker_metrics_server(runtime: Runtime, port: int | None = None, host: str | None = None) -> bool:
    """Serve /metrics for the workers on RELAY_WORKER_METRICS_HOST (127.0.0.1):PORT from a background thread, to
    the bearer of the metrics or admin token only, as the API's /metrics; False when off or taken.

    Safe to call in every worker process: the first to bind serves (in multiprocess mode, for all of them).
    """
    from app.observability.metrics_access import serve_in_thread

    settings = runtime.settings
    port = settings.worker_metrics_port if port is None else port
    host = host or settings.worker_metrics_host
    if port <= 0:
        return False
    try:
        serve_in_thread(worker_metrics_app(runtime), host, port)
    except OSError:  # a sibling worker process serves it (`relay worker` checked at start that none other does)
        log.debug("worker metrics port %d is served by another worker process", port)
        return False
    log.info("worker metrics on http://%s:%d/metrics", host, port)
    return True


def worker_metrics_app(runtime: Runtime) -> Any:
    """The WSGI app of the workers' metrics port: a fresh scrape per request, for metrics readers only."""
    from prometheus_client import make_wsgi_app

    from app.observability.metrics_access import token_guarded

    return token_guarded(make_wsgi_app(_ScrapeTimeRegistry(runtime)), runtime.settings)  # type: ignore[arg-type]


class _ScrapeTimeRegistry:
    """Looks like a registry to the exposition server; builds a fresh scrape registry on every scrape."""

    def __init__(self, runtime: Runtime | None) -> None:
        self._runtime = runtime

    def collect(self) -> Iterable[Any]:
        return scrape_registry(self._runtime).collect()

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return scrape_registry(self._runtime).restricted_registry(names)
