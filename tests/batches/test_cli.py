"""`relay batches ...` against a real API (gunicorn) and real workers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.processes import ROOT
from tests.batches.conftest import module_workers
from tests.batches.helpers import CHAT

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


workers = module_workers(processes=1)


def relay(relay_api, key: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "app.cli", "batches", *args, "--url", relay_api.url, "--key", key],
                          cwd=ROOT, input=stdin, capture_output=True, timeout=120, check=False)


def test_submit_waits_with_a_progress_bar_then_status_results_list_and_delete(relay_api, workers, key,
                                                                       tmp_path: Path) -> None:
    jsonl = tmp_path / "requests.jsonl"
    jsonl.write_text("\n".join(json.dumps(CHAT) for _ in range(5)) + "\n\n")
    done = relay(relay_api, key, "submit", str(jsonl), "--shape", "openai", "--wait", "--yes")
    assert done.returncode == 0, done.stderr.decode()
    batch_id = done.stdout.decode().splitlines()[0]
    assert "completed=5" in done.stdout.decode()
    assert "100% 5/5" in done.stderr.decode() and "[" in done.stderr.decode()
    assert re.search(r"\d+\.\d/s  ETA \d+:\d\d", done.stderr.decode()), done.stderr.decode()  # rate and ETA
    status = json.loads(relay(relay_api, key, "status", batch_id, "--json").stdout)
    assert status["counts"]["completed"] == 5 and status["finished"] is True
    lines = relay(relay_api, key, "results", batch_id).stdout.decode().splitlines()
    assert [json.loads(line)["idx"] for line in lines] == [0, 1, 2, 3, 4]
    assert all("response" in json.loads(line) for line in lines)
    listed = json.loads(relay(relay_api, key, "list", "--json").stdout)
    assert batch_id in [b["id"] for b in listed["data"]]
    deleted = relay(relay_api, key, "delete", batch_id, "--json")
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True
    gone = relay(relay_api, key, "status", batch_id)
    assert gone.returncode == 1 and b"batch_not_found" in gone.stderr


def test_cancel_and_errors_are_reported(relay_api, workers, make_key, upstream, tmp_path: Path) -> None:
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=5_000)
    submitted = relay(relay_api, key, "submit", "-", "--shape", "openai", "--yes",
                      stdin=b"\n".join(json.dumps(CHAT).encode() for _ in range(20)))
    assert submitted.returncode == 0, submitted.stderr.decode()
    batch_id = submitted.stdout.decode().strip()
    cancel = relay(relay_api, key, "cancel", batch_id, "--json")
    assert cancel.returncode == 0, cancel.stderr.decode()
    cancelled = json.loads(cancel.stdout)
    assert cancelled["status"] == "cancelled"
    bad = relay(relay_api, key, "submit", "-", "--shape", "openai", stdin=b'{"model": "x"}\n')
    assert bad.returncode == 1 and b"invalid_batch" in bad.stderr and b"requests[0].messages" in bad.stderr
    missing = relay(relay_api, key, "status", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1 and b"batch_not_found" in missing.stderr
    upstream.forget("sk-batch-slow")


def test_submit_wait_exits_3_when_items_were_discarded(relay_api, workers, key, tmp_path: Path) -> None:
    jsonl = tmp_path / "mixed.jsonl"
    jsonl.write_text(json.dumps(CHAT) + "\n" + json.dumps({**CHAT, "model": "no-such-model"}) + "\n")
    done = relay(relay_api, key, "submit", str(jsonl), "--shape", "openai", "--wait", "--yes")
    assert done.returncode == 3, done.stderr.decode()
    assert "completed=1 discarded=1 cancelled=0" in done.stdout.decode()


def test_a_missing_or_unreadable_file_is_one_line_not_a_traceback(relay_api, key, tmp_path: Path) -> None:
    for path in (tmp_path / "missing.jsonl", tmp_path):
        done = relay(relay_api, key, "submit", str(path), "--shape", "openai")
        err = done.stderr.decode()
        assert done.returncode == 1 and err.startswith(f"relay: unreadable_file: cannot read {path}: "), err
        assert "Traceback" not in err


def test_list_pages_with_after_and_status_pages_items(relay_api, make_key) -> None:
    key = make_key()["key"]
    ids = [relay(relay_api, key, "submit", "-", "--shape", "openai", "--yes",
                 stdin=b"\n".join([json.dumps(CHAT).encode()] * 5)).stdout.decode().strip() for _ in range(3)]
    first = json.loads(relay(relay_api, key, "list", "--limit", "2", "--json").stdout)
    assert [b["id"] for b in first["data"]] == ids[::-1][:2] and first["next_cursor"]
    second = json.loads(relay(relay_api, key, "list", "--limit", "2", "--after", first["next_cursor"],
                                   "--json").stdout)
    assert [b["id"] for b in second["data"]] == ids[:1] and second["next_cursor"] is None
    page = json.loads(relay(relay_api, key, "status", ids[0], "--limit", "2", "--after", "1", "--json").stdout)
    assert [i["idx"] for i in page["items"]] == [2, 3] and page["items_next_after"] == 3
    every = json.loads(relay(relay_api, key, "status", ids[0], "--limit", "2", "--all", "--json").stdout)
    assert [i["idx"] for i in every["items"]] == [0, 1, 2, 3, 4] and every["items_next_after"] is None


def test_the_apis_field_messages_are_printed(relay_api, key) -> None:
    done = relay(relay_api, key, "list", "--limit", "500")
    err = done.stderr.decode()
    assert done.returncode == 1 and err.startswith("relay: invalid_request: request failed validation"), err
    assert any(line.startswith("  query.limit: ") for line in err.splitlines()), err


def test_the_progress_line_shows_rate_and_eta() -> None:
    from app.commands.batch_views import progress_line

    batch = {"total": 1000, "counts": {"queued": 400, "running": 100, "completed": 480, "discarded": 20,
                                       "cancelled": 0}}
    line = progress_line(batch, width=10, rate=20.0)
    assert line == ("[#####.....]  50% 500/1000  20.0/s  ETA 0:25  completed 480  discarded 20  cancelled 0"
                    "  running 100  queued 400")
    assert "-/s  ETA -" in progress_line(batch, rate=None) and "ETA 1:23:20" in progress_line(batch, rate=0.1)
