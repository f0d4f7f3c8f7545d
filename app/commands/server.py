"""`relay migrate`, `relay api` and `relay worker`: run Relay's processes."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TypeVar

from app.errors import BrokerUnavailable
from app.settings import Settings

# psycopg, pika and the migrations are imported by the commands that run, not here: `relay api` (and `relay worker`
# under gevent) re-executes itself before it runs, and its first interpreter needs none of them.

T = TypeVar("T")


def register(sub: Any) -> None:
    p = sub.add_parser("migrate", help="apply database migrations")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("api", help="run the HTTP API under gunicorn (gevent workers)")
    p.add_argument("--bind", help="address:port (default $RELAY_API_BIND, 127.0.0.1:8080)")
    p.add_argument("--workers", type=int, help="server processes (default $RELAY_API_WORKERS, 2)")
    p.add_argument("--connections", type=int,
                   help="open connections per worker process, at most (each a greenlet; default"
                        " $RELAY_API_CONNECTIONS, 1000)")
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("worker", help="run the Dramatiq batch workers")
    p.add_argument("--processes", "-p", type=int, help="worker processes (default $RELAY_WORKER_PROCESSES, 2)")
    p.add_argument("--threads", "-t", type=int,
                   help="concurrent items per process (OS threads, or greenlets with --gevent; default"
                        " $RELAY_WORKER_THREADS, 16)")
    p.add_argument("--gevent", action="store_true", default=None,
                   help="run items on gevent greenlets (for hundreds of slow upstream calls per process; default"
                        " $RELAY_WORKER_GEVENT=1)")
    p.set_defaults(func=cmd_worker)


def preflight(settings: Settings) -> None:
    """Check Postgres and RabbitMQ once at start (one clear line if either is unreachable), then apply the
    migrations."""
    from app.db import check_database
    from app.migrate import apply_migrations
    from app.queue_backends import open_queue_probe

    check_database(settings.database_url)
    status = open_queue_probe(settings).check()
    if status != "ok":
        from urllib.parse import urlsplit

        nodes = ", ".join(f"{p.hostname}:{p.port or 5672}" for p in map(urlsplit, settings.broker_urls))
        raise BrokerUnavailable(message=f"cannot connect to RabbitMQ at {nodes} ({status})")
    apply_migrations(settings.database_url)


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.db import check_database
    from app.migrate import apply_migrations

    settings = Settings.from_env()
    check_database(settings.database_url)
    applied = apply_migrations(settings.database_url)
    print(f"applied migrations: {applied or 'none (up to date)'}")
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    if "gevent.monkey" not in sys.modules:  # patch before anything imports psycopg or socket: a fresh interpreter
        argv = _flags({"--bind": args.bind, "--workers": args.workers, "--connections": args.connections})
        os.execv(sys.executable, [sys.executable, "-c", _GEVENT_API_MAIN, *argv])  # noqa: S606
    from app.api.server import run_gunicorn

    settings = Settings.from_env()
    preflight(settings)
    from app.observability.metrics import prepare_metrics_dir

    prepare_metrics_dir()
    run_gunicorn(_create_app, bind=_given(args.bind, settings.api_bind),
                 workers=_given(args.workers, settings.api_workers),
                 connections=_given(args.connections, settings.api_connections),
                 header_timeout_s=settings.api_header_timeout_s, io_timeout_s=settings.api_io_timeout_s,
                 connections_per_address=settings.api_connections_per_address)
    return 0


def _create_app() -> Any:
    """The app factory, imported in the gunicorn worker after the fork (and after the metrics directory is set)."""
    from app.api.factory import create_app

    return create_app()


def cmd_worker(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    gevent = _given(args.gevent, settings.worker_gevent)
    if gevent and "gevent.monkey" not in sys.modules:  # patch before anything imports socket: a fresh interpreter
        argv = _flags({"--processes": args.processes, "--threads": args.threads})
        os.execv(sys.executable, [sys.executable, "-c", _GEVENT_WORKER_MAIN, *argv, "--gevent"])  # noqa: S606
    preflight(settings)
    timeout_ms = int((settings.batch_item_time_limit_s + 30) * 1000)
    threads = _given(args.threads, settings.worker_threads)
    os.environ.setdefault("dramatiq_queue_prefetch", str(threads))
    processes = _given(args.processes, settings.worker_processes)
    argv = ["dramatiq", "actors.worker", "--processes", str(processes), "--threads", str(threads),
            "--queues", settings.queue_name, "--worker-shutdown-timeout", str(timeout_ms)]
    from dramatiq.cli import main as dramatiq_main

    from app.observability.metrics import check_worker_metrics_port, prepare_metrics_dir

    check_worker_metrics_port(settings.worker_metrics_port, settings.worker_metrics_host)
    prepare_metrics_dir()  # removed when this process exits (so made after the exec above, not before it)
    # The engine, which each worker process imports (through actors.worker) after Dramatiq forks it: imported once
    # here, before the fork, so that each process starts with it loaded (about 0.18 s of CPU less a process). After
    # prepare_metrics_dir: prometheus_client, if anything imports it, must see the multiprocess directory.
    import app.batches.dispatch
    import app.batches.monitor  # noqa: F401

    sys.argv = argv
    return int(dramatiq_main() or 0)


def _flags(given: dict[str, Any]) -> list[str]:
    """The command-line flags of GIVEN that were given (not None), for the same command in a fresh interpreter."""
    return [part for flag, value in given.items() if value is not None for part in (flag, str(value))]


def _given(flag: T | None, setting: T) -> T:
    """A command-line flag when given, else its setting (RELAY_*)."""
    return setting if flag is None else flag


_GEVENT_API_MAIN = ("from gevent import monkey; monkey.patch_all(); import sys; from app.cli import main;"
                    " sys.exit(main(['api', *sys.argv[1:]]))")
# What `dramatiq-gevent` does: patch everything, then Dramatiq's CLI, here through `relay worker` (its worker
# processes inherit the patch).
_GEVENT_WORKER_MAIN = ("from gevent import monkey; monkey.patch_all(); import sys; from app.cli import main;"
                       " sys.exit(main(['worker', *sys.argv[1:]]))")
