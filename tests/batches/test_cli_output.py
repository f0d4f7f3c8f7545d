"""What `relay batches` and `relay admin-batches` print in a terminal, run for real against a real API and real
workers: summaries and tables for people (`--json` for scripts), a progress bar that redraws cleanly and counts the
queued items, errors by file line, a hint for the admin token, and `submit --wait` outliving an API restart."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster.ports import reserve
from devtools.processes import ROOT, start_api
from devtools.waiting import until
from tests.batches.helpers import CHAT

pytestmark = pytest.mark.integration


def cli(url: str, secret: str, *args: str, command: str = "batches",
        flag: str = "--key") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RELAY_KEY", "RELAY_ADMIN_TOKEN")}
    return subprocess.run([sys.executable, "-m", "app.cli", command, *args, "--url", url, flag, secret], cwd=ROOT,
                          capture_output=True, text=True, timeout=180, check=False, env=env)


def screen(stream: str) -> list[str]:
    """What a terminal shows for STREAM: a carriage return moves back to the start of the line, whose characters
    are overwritten one by one (not cleared)."""
    lines, current = [], ""
    for chunk in stream.split("\n"):
        for part in chunk.split("\r"):
            current = part + current[len(part):]
        lines.append(current)
        current = ""
    return lines


def _jsonl(tmp_path: Path, *bodies: Any, blank_after: int | None = None) -> Path:
    path = tmp_path / "requests.jsonl"
    text = [json.dumps(b) for b in bodies]
    if blank_after is not None:
        text.insert(blank_after, "")
    path.write_text("\n".join(text) + "\n")
    return path


def test_status_list_and_results_speak_to_people_and_json_stays_for_scripts(relay_api, workers, key,  # type: ignore[no-untyped-def]
                                                                              tmp_path) -> None:
    submitted = cli(relay_api.url, key, "submit", str(_jsonl(tmp_path, *[CHAT] * 3)), "--shape", "openai",
                    "--metadata", '{"name": "nightly"}', "--wait", "--yes")
    assert submitted.returncode == 0, submitted.stderr
    batch_id = submitted.stdout.splitlines()[0]
    status = cli(relay_api.url, key, "status", batch_id)
    lines = status.stdout.splitlines()
    assert lines[0] == f"batch {batch_id}: done — nightly"
    assert lines[1] == "  3 items (relay API, shape openai): 3 completed, 0 discarded, 0 cancelled, 0 running, 0 queued"
    assert lines[3].startswith("  cost $0.0000") and "tokens" in lines[3]
    assert "policy main" in lines[4] and "principal batch-svc" in lines[4]
    assert lines[6].split() == ["IDX", "STATE", "MODEL", "ERROR"] and lines[7].split()[:3] == ["0", "completed",
                                                                                               "gpt-4o-mini"]
    assert len(lines) == 10  # a summary and a table, not the API's JSON
    assert json.loads(cli(relay_api.url, key, "status", batch_id, "--json").stdout)["id"] == batch_id
    listed = cli(relay_api.url, key, "list", "--search", "nightly").stdout.splitlines()
    assert listed[0].split() == ["ID", "CREATED", "API", "SHAPE", "STATE", "ITEMS", "COST", "NAME"]
    assert listed[1].startswith(batch_id) and listed[1].split()[-4:-2] == ["done", "3"]
    assert listed[1].endswith("nightly")
    out = tmp_path / "out.jsonl"
    written = cli(relay_api.url, key, "results", batch_id, "-o", str(out))
    assert written.returncode == 0 and written.stdout == f"wrote 3 results ({out.stat().st_size} bytes) to {out}\n"
    assert cli(relay_api.url, key, "list", "--state", "cancelled", "--search", "nightly").stdout == "no batches match\n"


class Terminal(io.StringIO):
    """What a terminal receives: a stream that says it is one."""

    def isatty(self) -> bool:
        return True


def waited(answers: list[dict[str, Any]], out: io.StringIO, columns: int = 200) -> None:
    from app.commands.batch_wait import wait_for

    pending = iter(answers)
    wait_for(lambda: next(pending), "b", out, interval=0, columns=lambda: columns)


RUNNING = {"total": 100, "finished": False, "counts": {"queued": 0, "running": 100, "completed": 0, "discarded": 0,
                                                       "cancelled": 0}}
LATER = {**RUNNING, "counts": {**RUNNING["counts"], "running": 3, "completed": 97}}
DONE = {**LATER, "finished": True, "counts": {**LATER["counts"], "running": 0, "completed": 100}}


def test_the_progress_bar_counts_queued_items_and_leaves_nothing_behind_when_it_shrinks() -> None:
    out = Terminal()
    waited([RUNNING, LATER, DONE], out)
    drawn = out.getvalue().split("\r")[1:]
    assert "queued 0" in drawn[0] and "running 100" in drawn[0]
    shown = screen(out.getvalue())
    assert shown[0].rstrip() == drawn[-1].rstrip()  # what the terminal shows is the last line, nothing of the others
    assert "running 100" not in shown[0] and shown[0].rstrip().endswith("running 0  queued 0")


@pytest.mark.parametrize("columns", [200, 80, 60, 40, 20])
def test_the_progress_line_never_outgrows_the_terminal(columns: int) -> None:
    out = Terminal()
    waited([RUNNING, LATER, DONE], out, columns=columns)
    drawn = [d.rstrip("\n") for d in out.getvalue().split("\r")[1:]]
    assert len(drawn) == 3 and all(0 < len(line) <= columns - 1 for line in drawn), drawn
    assert "100/100" in drawn[-1] or columns < 20
    if columns >= 80:
        assert "ok 100" in drawn[-1] or "completed 100" in drawn[-1]


def test_without_a_terminal_the_progress_is_one_line_at_the_end() -> None:
    out = io.StringIO()
    waited([RUNNING, LATER, DONE], out)
    assert "\r" not in out.getvalue() and out.getvalue().count("\n") == 1
    assert out.getvalue().startswith("[##############################] 100% 100/100")


def test_a_refused_batch_is_told_by_file_line_as_the_console_tells_it(relay_api, key, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _jsonl(tmp_path, CHAT, {"model": "gpt-4o-mini"}, CHAT, {**CHAT, "custom_id": "q-3"}, blank_after=1)
    refused = cli(relay_api.url, key, "submit", str(path), "--shape", "openai")
    assert refused.returncode == 1
    err = refused.stderr.splitlines()
    assert err[0].startswith(f"relay: invalid_batch: invalid batch: {path}:3: requests[1].messages: is required")
    assert "  line 3, requests[1].messages: is required" in err
    assert any(line.startswith("  line 5, requests[3].custom_id: is not a member of a request body") for line in err)


def test_the_admin_token_given_to_relay_batches_is_told_where_it_belongs(relay_api, settings) -> None:  # type: ignore[no-untyped-def]
    refused = cli(relay_api.url, settings.admin_token, "list")
    assert refused.returncode == 1
    assert refused.stderr.startswith("relay: invalid_credential: ") and "relay admin-batches" in refused.stderr
    assert "rk_" in refused.stderr and "Traceback" not in refused.stderr
    wrong = cli(relay_api.url, "rk_not-a-key", "list")
    assert wrong.returncode == 1 and "admin-batches" not in wrong.stderr  # a wrong key is only a wrong key


def test_the_admin_cli_takes_any_spelling_of_an_id_and_says_where_items_wait(relay_api, workers, settings,  # type: ignore[no-untyped-def]
                                                                             key, tmp_path) -> None:
    batch_id = cli(relay_api.url, key, "submit", str(_jsonl(tmp_path, CHAT)), "--shape", "openai",
                   "--wait", "--yes").stdout.splitlines()[0]
    for spelled in (f"batch_{batch_id.replace('-', '')}", f"msgbatch_{batch_id.replace('-', '')}"):
        status = cli(relay_api.url, settings.admin_token, "status", spelled, command="admin-batches", flag="--token")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"batch {batch_id}: done")
    fleet = cli(relay_api.url, settings.admin_token, "workers", command="admin-batches", flag="--token").stdout
    assert "queued in Postgres" in fleet and "not yet published to RabbitMQ" in fleet
    assert fleet.splitlines()[0].startswith("workers: ") and "alive" in fleet


def test_submit_wait_outlives_an_api_restart_and_says_what_it_is_doing(settings_env, workers, key, upstream,  # type: ignore[no-untyped-def]
                                                                       make_key, tmp_path) -> None:
    slow = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=2_500)  # below the items' 4 s limit
    [port] = reserve(1, tmp_path)  # restarted on its address below: outside the ephemeral range, claimed
    api = start_api(settings_env, tmp_path, port=port)
    waiting = subprocess.Popen([sys.executable, "-m", "app.cli", "batches", "submit",
                                str(_jsonl(tmp_path, *[CHAT] * 4)), "--shape", "openai", "--wait", "--yes",
                                "--url", api.url, "--key", slow], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: upstream.stats()["in_flight"] >= 4, what="the batch running")
        api.stop(signal.SIGTERM)
        time.sleep(1.5)  # the CLI finds nobody there for a while
        api = start_api(settings_env, tmp_path, port=port)
        out, err = waiting.communicate(timeout=120)
    finally:
        upstream.forget("sk-batch-slow")
        if waiting.poll() is None:
            waiting.kill()
        api.stop()
    assert waiting.returncode == 0, err
    assert out.splitlines()[1] == "completed=4 discarded=0 cancelled=0"
    told = [line for line in err.splitlines() if line.startswith("relay: ")]
    assert told and told[0].startswith(f"relay: cannot reach the Relay API at {api.url}: ")
    assert f"batch {out.splitlines()[0]} keeps running meanwhile; asking again in 0.5 s" in told[0]
    assert told[-1].startswith("relay: the Relay API answers again (after ")


def test_ctrl_c_during_wait_stops_following_not_the_batch_and_says_how_to_cancel_it(  # type: ignore[no-untyped-def]
        relay_api, workers, make_key, upstream, tmp_path) -> None:
    slow = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=3_000)
    waiting = subprocess.Popen([sys.executable, "-m", "app.cli", "batches", "submit",
                                str(_jsonl(tmp_path, *[CHAT] * 2)), "--shape", "openai", "--wait", "--yes",
                                "--url", relay_api.url, "--key", slow], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               preexec_fn=_as_from_a_terminal)
    try:
        # its id printed: it is following
        assert waiting.stdout is not None
        batch_id = waiting.stdout.readline().strip()
        until(lambda: upstream.stats()["in_flight"] >= 1, what="the batch running")
        assert waiting.poll() is None, "the CLI stopped waiting before its Ctrl-C"
        waiting.send_signal(signal.SIGINT)
        _, err = waiting.communicate(timeout=60)
    finally:
        upstream.forget("sk-batch-slow")
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (f"stopped waiting; batch {batch_id} keeps running. Follow it: relay batches status"
                                    f" {batch_id}  Cancel it: relay batches cancel {batch_id}")
    status = json.loads(cli(relay_api.url, slow, "status", batch_id, "--json").stdout)
    assert status["status"] == "queued"  # not cancelled: it runs on


def _as_from_a_terminal() -> None:
    """In the child before its exec: SIGINT unblocked and at its default, as a shell starts a command in a terminal.
    A test run started in the background by a non-interactive shell (`cmd &`, nohup) ignores SIGINT, every child
    inherits that, and Python installs its KeyboardInterrupt handler only over the default: the CLI then never saw
    its Ctrl-C."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _openai_input(tmp_path: Path, count: int, url: str = "/v1/chat/completions") -> Path:
    path = tmp_path / "openai-input.jsonl"
    path.write_text("".join(json.dumps({"custom_id": f"q-{i}", "method": "POST", "url": url, "body": CHAT}) + "\n"
                            for i in range(count)))
    return path


def test_an_openai_batch_input_file_is_recognised_and_keeps_its_custom_ids(relay_api, workers, key,  # type: ignore[no-untyped-def]
                                                                            tmp_path) -> None:
    path = _openai_input(tmp_path, 3)
    done = cli(relay_api.url, key, "submit", str(path), "--wait", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("estimate: 3 items, shape openai")
    batch = json.loads(cli(relay_api.url, key, "status", done.stdout.splitlines()[0], "--json").stdout)
    assert batch["api"] == "openai" and batch["counts"]["completed"] == 3
    assert sorted(i["custom_id"] for i in batch["items"]) == ["q-0", "q-1", "q-2"]
    named = cli(relay_api.url, key, "estimate", str(path), "--format", "openai")
    assert named.returncode == 0 and "3 items, shape openai" in named.stdout, named.stderr
    capped = cli(relay_api.url, key, "submit", str(path), "--max-cost", "1", "--yes")
    assert capped.returncode == 1 and "relay: invalid_requests_file: " in capped.stderr
    assert "takes no --max-cost" in capped.stderr
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(path.read_text() + json.dumps({"custom_id": "e", "url": "/v1/embeddings", "body": CHAT}) + "\n")
    refused = cli(relay_api.url, key, "submit", str(mixed), "--yes")
    assert refused.returncode == 1 and "names one endpoint in every line's url" in refused.stderr


def test_the_same_problem_of_many_items_is_told_once(relay_api, key, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _openai_input(tmp_path, 30)
    refused = cli(relay_api.url, key, "submit", str(path), "--format", "relay", "--shape", "openai", "--yes")
    assert refused.returncode == 1
    details = [line for line in refused.stderr.splitlines() if line.startswith("  ")]
    assert details and all("(30 items)" in line for line in details), refused.stderr
    assert details[0].startswith("  lines 1, 2, 3, 4, 5 and 25 more (30 items), ")
    assert len(details) == len(set(details))  # one line per problem, not per item
    bare = cli(relay_api.url, key, "submit", str(_jsonl(tmp_path, CHAT)), "--yes")
    assert bare.returncode == 1 and "needs --shape" in bare.stderr
