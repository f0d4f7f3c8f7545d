"""`relay worker` refuses to start when its metrics port is taken by another process (another Relay install on the
host, say): its workers would serve no metrics while the port answered someone else's numbers."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from devtools.processes import start_relay

pytestmark = pytest.mark.integration


class _Done:
    def __init__(self, returncode: int | None, stderr: str) -> None:
        self.returncode, self.stderr = returncode, stderr


def _worker(env: dict[str, str], log: Path, **overrides: str) -> _Done:
    """Run `relay worker` until it exits (a worker that starts anyway is stopped after 60 s, its whole group)."""
    worker = start_relay(["worker", "-p", "1", "-t", "1"], {**env, **overrides}, log)
    try:
        worker.proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        returncode = worker.proc.poll()
        worker.stop()
    return _Done(returncode, worker.log())


def test_a_taken_metrics_port_stops_the_worker_at_start_naming_the_port_and_the_variable(settings_env,  # type: ignore[no-untyped-def]
                                                                                        tmp_path) -> None:
    with socket.socket() as other_install:
        other_install.bind(("127.0.0.1", 0))
        other_install.listen()
        port = other_install.getsockname()[1]
        done = _worker(settings_env, tmp_path / "worker.log", RELAY_WORKER_METRICS_PORT=str(port))
    assert done.returncode == 2, done.stderr[-2000:]
    first = done.stderr.strip().splitlines()[-1]
    assert first.startswith(f"relay: configuration error: RELAY_WORKER_METRICS_PORT: port {port} on 127.0.0.1 is"
                            " taken by another process"), done.stderr[-2000:]
    assert "or 0 to turn the workers' metrics off" in first and "Traceback" not in done.stderr


def test_a_metrics_port_that_is_not_a_number_is_a_configuration_error(settings_env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = _worker(settings_env, tmp_path / "worker.log", RELAY_WORKER_METRICS_PORT="ninety")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("relay: configuration error: RELAY_WORKER_METRICS_PORT must be a"
                                                    " port number (0 turns the workers' metrics off), not 'ninety'")
