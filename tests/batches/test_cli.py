"""`relay batches ...` against a real API (gunicorn) and real workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, start_workers
from tests.processes import ROOT, RelayProcess

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.fixture(scope="module")
def workers(settings_env, runtime, catalog, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    proc = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=4,
                         **WORKER_SETTINGS)
    yield proc
    proc.stop()


def relay(relay_api, key: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "app.cli", "batches", *args, "--url", relay_api.url, "--key", key],
                          cwd=ROOT, input=stdin, capture_output=True, timeout=120, check=False)


def test_submit_waits_with_a_progress_bar_then_status_results_list_and_delete(relay_api, workers, key,
                                                                       tmp_path: Path) -> None:
    jsonl = tmp_path / "requests.jsonl"
    jsonl.write_text("\n".join(json.dumps(CHAT) for _ in range(5)) + "\n\n")
    done = relay(relay_api, key, "submit", str(jsonl), "--shape", "openai", "--wait")
    assert done.returncode == 0, done.stderr.decode()
    batch_id = done.stdout.decode().splitlines()[0]
    assert "completed=5" in done.stdout.decode()
    assert "100% 5/5" in done.stderr.decode() and "[" in done.stderr.decode()
    status = json.loads(relay(relay_api, key, "status", batch_id).stdout)
    assert status["counts"]["completed"] == 5 and status["finished"] is True
    lines = relay(relay_api, key, "results", batch_id).stdout.decode().splitlines()
    assert [json.loads(line)["idx"] for line in lines] == [0, 1, 2, 3, 4]
    assert all("response" in json.loads(line) for line in lines)
    listed = json.loads(relay(relay_api, key, "list").stdout)
    assert batch_id in [b["id"] for b in listed["data"]]
    deleted = relay(relay_api, key, "delete", batch_id)
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True
    gone = relay(relay_api, key, "status", batch_id)
    assert gone.returncode == 1 and b"batch_not_found" in gone.stderr


def test_cancel_and_errors_are_reported(relay_api, workers, make_key, upstream, tmp_path: Path) -> None:
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=5_000)
    submitted = relay(relay_api, key, "submit", "-", "--shape", "openai",
                      stdin=b"\n".join(json.dumps(CHAT).encode() for _ in range(20)))
    batch_id = submitted.stdout.decode().strip()
    cancelled = json.loads(relay(relay_api, key, "cancel", batch_id).stdout)
    assert cancelled["status"] == "cancelled"
    bad = relay(relay_api, key, "submit", "-", "--shape", "openai", stdin=b'{"model": "x"}\n')
    assert bad.returncode == 1 and b"invalid_batch" in bad.stderr and b"requests[0].messages" in bad.stderr
    missing = relay(relay_api, key, "status", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1 and b"batch_not_found" in missing.stderr
    upstream.forget("sk-batch-slow")
