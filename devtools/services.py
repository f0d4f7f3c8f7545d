"""Test access to the project-local services: a fresh database and RabbitMQ vhost per test session.

Set RELAY_TEST_DB (default relay_test) to isolate parallel runs; the vhost takes the same name. Under pytest-xdist
each worker derives its own name, `<RELAY_TEST_DB>_gw0`, `_gw1`, ... (`worker_db_name`).
Under CI=true a missing service fails the run instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import requests

from devtools.waiting import until

ROOT = Path(__file__).resolve().parent.parent
PG_PORT = int(os.environ.get("RELAY_PG_PORT", "54329"))
MQ_PORT = int(os.environ.get("RELAY_MQ_PORT", "5699"))
MQ_UI_PORT = int(os.environ.get("RELAY_MQ_UI_PORT", "15699"))
ADMIN_DB_URL = f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres"


@dataclass(frozen=True)
class ServiceUrls:
    database_url: str
    broker_url: str
    vhost: str
    mq_api: str


def worker_db_name() -> str:
    """This test process's database and vhost name: RELAY_TEST_DB, plus `_<worker>` under a pytest-xdist worker."""
    base = os.environ.get("RELAY_TEST_DB", "relay_test")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"{base}_{worker}" if worker and not base.endswith("_" + worker) else base


def services_up(timeout: float = 3) -> bool:
    try:
        with psycopg.connect(ADMIN_DB_URL, connect_timeout=max(2, round(timeout))):
            pass
        overview = f"http://127.0.0.1:{MQ_UI_PORT}/api/overview"
        requests.get(overview, auth=("guest", "guest"), timeout=timeout).raise_for_status()
        return True
    except Exception:
        return False


UP_WAIT_S = 120.0  # how long services that scripts/services.sh started may take to answer (a bound only a hang crosses)


def ensure_services() -> None:
    """Start the local services with scripts/services.sh when they are not answering. Running services may answer
    slowly on a loaded machine (RabbitMQ's overview takes seconds there): after `up`, they are asked again, with
    longer timeouts, for up to UP_WAIT_S."""
    if services_up():
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "up"], check=True, stdout=subprocess.DEVNULL)
    until(lambda: services_up(timeout=15), what="Postgres and RabbitMQ to answer after scripts/services.sh up",
          timeout=UP_WAIT_S, every=1)


def fresh_services(name: str) -> ServiceUrls:
    """Drop and recreate database NAME and vhost NAME; apply migrations; return their URLs."""
    with psycopg.connect(ADMIN_DB_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    mq_api = f"http://127.0.0.1:{MQ_UI_PORT}/api"
    auth = ("guest", "guest")
    vh = quote(name, safe="")
    requests.delete(f"{mq_api}/vhosts/{vh}", auth=auth, timeout=30)
    requests.put(f"{mq_api}/vhosts/{vh}", auth=auth, timeout=30).raise_for_status()
    requests.put(f"{mq_api}/permissions/{vh}/guest", json={"configure": ".*", "write": ".*", "read": ".*"},
                 auth=auth, timeout=30).raise_for_status()
    database_url = f"postgresql://postgres@127.0.0.1:{PG_PORT}/{name}"
    from app.migrate import apply_migrations

    apply_migrations(database_url)
    return ServiceUrls(database_url=database_url, broker_url=f"amqp://guest:guest@127.0.0.1:{MQ_PORT}/{vh}",
                        vhost=name, mq_api=mq_api)


def queue_depth(services: ServiceUrls, queue: str) -> int:
    """Messages ready + unacked in QUEUE, counted by a passive declare (the HTTP stats lag ~5 s)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(services.broker_url))
    try:
        ch = conn.channel()
        return int(ch.queue_declare(queue=queue, passive=True).method.message_count)
    finally:
        conn.close()
