"""A private Postgres and RabbitMQ (scripts/services.sh in a temporary directory, on free ports) that fault tests
may stop and restart without touching the services other test runs share."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from devtools.cluster.pgnodes import alive
from devtools.cluster.ports import reserve
from devtools.processes import ROOT
from devtools.waiting import until


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql (run scripts/services.sh up once)")
    return found[-1]


@dataclass
class PrivateServices:
    """Postgres + RabbitMQ under DIRECTORY; `up()` starts both, `down()` stops both."""

    directory: Path
    pg_port: int
    mq_port: int
    mq_ui_port: int
    mq_dist_port: int

    @classmethod
    def allocate(cls, directory: Path) -> PrivateServices:
        """Ports below the kernel's ephemeral range, claimed for DIRECTORY: a stopped RabbitMQ or Postgres gets its
        ports back on restart (a port found free in the ephemeral range could be taken meanwhile by any outgoing
        connection, and the restart failed on exactly that)."""
        pg, mq, ui, dist = reserve(4, directory)
        return cls(directory=directory, pg_port=pg, mq_port=mq, mq_ui_port=ui, mq_dist_port=dist)

    @property
    def mq_node(self) -> str:
        return f"relay-{self.mq_port}@localhost"

    @property
    def admin_db_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/{name}"

    @property
    def broker_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.mq_port}/%2F"

    def env(self) -> dict[str, str]:
        return {**os.environ, "RELAY_SERVICES_DIR": str(self.directory), "RELAY_PG_PORT": str(self.pg_port),
                "RELAY_MQ_PORT": str(self.mq_port), "RELAY_MQ_UI_PORT": str(self.mq_ui_port),
                "RELAY_MQ_DIST_PORT": str(self.mq_dist_port)}

    def _services(self, command: str, timeout: float = 180) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), command], env=self.env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)

    def up(self) -> None:
        """Start whatever is not running (both at first; a stopped RabbitMQ node after `stop_rabbitmq`)."""
        self._services("up")

    def down(self) -> None:
        self._services("down")

    def create_database(self, name: str) -> str:
        """Drop and create database NAME with the migrations applied; its URL."""
        with psycopg.connect(self.admin_db_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        from app.migrate import apply_migrations

        url = self.database_url(name)
        apply_migrations(url)
        return url

    # -- faults --------------------------------------------------------------------------------------------
    def _pg_ctl(self, *args: str) -> None:
        data = self.directory / "postgres" / "data"
        done = subprocess.run(["runuser", "-u", "postgres", "--", str(_pg_bin() / "pg_ctl"), "-D", str(data), *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        if done.returncode:
            raise RuntimeError(f"pg_ctl {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")

    def stop_postgres(self) -> None:
        """A fast shutdown: every client connection is cut."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def start_postgres(self) -> None:
        self._pg_ctl("-l", str(self.directory / "postgres" / "postgres.log"), "-w", "-t", "60", "start")

    def stop_rabbitmq(self, timeout: float = 120) -> None:
        """Stop the whole RabbitMQ node as a service manager does: SIGTERM, on which the node shuts down gracefully
        (the Erlang VM exits; every connection drops). `rabbitmqctl stop` first boots an Erlang VM of its own, which
        took long enough on a loaded machine for a 15 s paced batch to end before the node stopped."""
        pid = int((self.directory / "rabbitmq" / "rabbit.pid").read_text().strip())
        os.kill(pid, signal.SIGTERM)
        until(lambda: not alive(pid), what=f"RabbitMQ node {self.mq_node} (pid {pid}) to exit after SIGTERM",
              timeout=timeout, every=0.05)

    def start_rabbitmq(self) -> None:
        """Start the node again (scripts/services.sh up starts only what is down)."""
        self.up()

    def wait_for_postgres(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.admin_db_url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
