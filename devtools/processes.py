"""Starting Relay's real processes (API under gunicorn, Dramatiq workers) for integration tests and the bench."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from app.runtime import Runtime

ROOT = Path(__file__).resolve().parent.parent
RELAY = [sys.executable, "-m", "app.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RelayProcess:
    """A running `relay ...` process in its own process group, with its output in a log file."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    url: str = ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Signal the main process only (Dramatiq's CLI forwards it to its children once), then kill the group.
        SIGKILL goes to the whole group at once: a crash, where no child outlives the main process for a moment
        (and, say, finishes a request file it was writing)."""
        if sig != signal.SIGKILL and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_relay(args: list[str], env: dict[str, str], log_path: Path) -> RelayProcess:
    """Run `relay ARGS` with ENV in a new process group, output to LOG_PATH."""
    out = open(log_path, "wb")
    proc = subprocess.Popen([*RELAY, *args], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return RelayProcess(proc=proc, log_path=log_path)


def tcp_sockets(pid: int) -> list[tuple[int, str]]:
    """(local port, state: "0A" is LISTEN) of each TCP socket process PID holds; [] once it is gone. Read from
    /proc: the process's socket inodes matched against its network namespace's tables."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except FileNotFoundError:  # closed meanwhile
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
        tables = [Path(f"/proc/{pid}/net/{table}").read_text() for table in ("tcp", "tcp6")]
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [(int(fields[1].rsplit(":", 1)[1], 16), fields[3]) for table in tables
            for fields in map(str.split, table.splitlines()[1:]) if fields[9] in inodes]


def listening_port(pid: int) -> int | None:
    """The TCP port process PID listens on (the OS chose it: the process bound port 0), or None yet."""
    return next((port for port, state in tcp_sockets(pid) if state == "0A"), None)


def start_api(env: dict[str, str], log_dir: Path, *, workers: int = 1, connections: int = 1000,
              port: int = 0) -> RelayProcess:
    """Start `relay api` on loopback PORT and wait until /readyz answers 200. By default the OS picks the port (the
    process binds port 0 and the port it got is read back); a PORT is for a restart on the same address."""
    api = start_relay(["api", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                       "--connections", str(connections)],
                      env, log_dir / f"api-{port or 'any'}-{time.monotonic_ns()}.log")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if api.proc.poll() is not None:
            raise RuntimeError(f"relay api exited early:\n{api.log()}")
        bound = port or listening_port(api.proc.pid)
        if bound:
            api.url = f"http://127.0.0.1:{bound}"
            try:
                if requests.get(api.url + "/readyz", timeout=2).status_code == 200:
                    return api
            except requests.RequestException:
                pass
        time.sleep(0.1)
    api.stop()
    raise RuntimeError(f"relay api did not become ready:\n{api.log()}")


def start_workers(env: dict[str, str], log_dir: Path, runtime: Runtime, *, processes: int = 2, threads: int = 4,
                  extra: tuple[str, ...] = (), **overrides: Any) -> RelayProcess:
    """`relay worker` with ENV (+ RELAY_* OVERRIDES, + EXTRA arguments); returns once every process heartbeats."""
    env = {**env, **{"RELAY_" + k.upper(): str(v) for k, v in overrides.items()}}
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT now() AS t").fetchone()["t"]  # type: ignore[index,call-overload]
    workers = start_relay(["worker", "-p", str(processes), "-t", str(threads), *extra], env,
                          log_dir / f"worker-{time.monotonic_ns()}.log")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if workers.proc.poll() is not None:
            raise RuntimeError(f"relay worker exited early:\n{workers.log()}")
        with runtime.pool.connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM workers WHERE started_at >= %s", (before,)).fetchone()
        if row and row["n"] >= processes:  # type: ignore[call-overload]
            return workers
        time.sleep(0.1)
    workers.stop()
    raise RuntimeError(f"relay worker did not start:\n{workers.log()}")
