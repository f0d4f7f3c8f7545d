"""`relay batches` for re-runs, estimates and pacing, run for real against a real API and real workers: submit prints
the estimate first and asks before a large spend (on a terminal; refuses without one unless --yes), `rerun` makes
the new batch of what failed, and a paced batch's status and progress show its rate and expected finish."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.processes import ROOT
from devtools.waiting import until
from tests.batches.helpers import CHAT
from tests.batches.test_cli_output import _jsonl, cli

pytestmark = pytest.mark.integration

PRICEY = {**CHAT, "max_tokens": 1000}  # a bound of about $0.0006 an item at the test catalog's prices


def _batches(url: str, key: str) -> list[str]:
    return [b["id"] for b in json.loads(cli(url, key, "list", "--json").stdout)["data"]]


def test_submit_prints_the_estimate_first_and_without_a_terminal_refuses_a_large_spend_unless_yes(
        relay_api, workers, make_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    path = _jsonl(tmp_path, *[PRICEY] * 3, {**CHAT, "model": "no-such-model"})
    refused = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--confirm-above", "0.001")
    assert refused.returncode == 1, refused.stderr
    err = refused.stderr.splitlines()
    assert err[0] == "estimate: 4 items, shape openai (nothing is stored or run yet)"
    assert err[1].split() == ["MODEL", "ITEMS", "RUNS", "ON", "COST", "AT", "MOST"]
    model = err[2].split()
    assert model[:3] == ["gpt-4o-mini", "3", "openai/gpt-4o-mini-2024"] and model[3].startswith("$0.00")
    assert err[3].split()[:4] == ["no-such-model", "1", "not", "run:"]
    assert any(line.startswith("  cost at most $0.00") and "output ≤ 3000 tokens" in line for line in err)
    assert "  timing: your policy has no rate limits: every item starts as fast as the workers take it" in err
    assert err[-1].startswith("relay: confirmation_required: the batch may cost up to $0.00")
    assert "--confirm-above $0.001" in err[-1] and "pass --yes" in err[-1]
    assert _batches(relay_api.url, key) == []  # nothing was submitted
    ok = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--confirm-above", "0.001", "--yes")
    assert ok.returncode == 0, ok.stderr
    assert _batches(relay_api.url, key) == [ok.stdout.splitlines()[0]]
    under = cli(relay_api.url, key, "submit", str(path), "--shape", "openai")  # the default threshold: $1
    assert under.returncode == 0 and under.stderr.startswith("estimate: 4 items"), under.stderr


def _on_a_terminal(url: str, key: str, path: Path, answer: bytes) -> tuple[int, str]:
    """`relay batches submit` with a terminal as standard input, answering ANSWER to its question."""
    leader, follower = os.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("RELAY_KEY", "RELAY_CONFIRM_ABOVE")}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "batches", "submit", str(path), "--shape", "openai",
                             "--url", url, "--key", key], cwd=ROOT, stdin=follower, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env, "RELAY_CONFIRM_ABOVE": "0.001"})
    os.close(follower)
    os.write(leader, answer)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(leader)
    return proc.returncode, out + err


def test_on_a_terminal_submit_asks_before_a_large_spend_and_submits_only_on_yes(relay_api, make_key,  # type: ignore[no-untyped-def]
                                                                                tmp_path: Path) -> None:
    key = make_key()["key"]
    path = _jsonl(tmp_path, *[PRICEY] * 2)
    code, said = _on_a_terminal(relay_api.url, key, path, b"n\n")
    assert code == 1 and "Submit 2 items for up to $0.00" in said and "? [y/N] " in said, said
    assert "relay: not_confirmed: nothing was submitted" in said
    assert _batches(relay_api.url, key) == []
    code, said = _on_a_terminal(relay_api.url, key, path, b"y\n")
    assert code == 0, said
    assert len(_batches(relay_api.url, key)) == 1


def test_a_batch_with_no_cost_bound_is_asked_about_too_unless_a_spend_cap_bounds_it(relay_api, make_key,  # type: ignore[no-untyped-def]
                                                                                     tmp_path: Path) -> None:
    key = make_key()["key"]
    path = _jsonl(tmp_path, PRICEY, CHAT)  # CHAT has no max_tokens, and the model no max_output_tokens
    refused = cli(relay_api.url, key, "submit", str(path), "--shape", "openai")
    assert refused.returncode == 1 and "cost: no upper bound" in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "relay: confirmation_required: the batch has no upper bound on its cost (see the estimate; --max-cost caps"
        " it), and there is no terminal to ask: pass --yes to submit it; nothing was submitted")
    assert _batches(relay_api.url, key) == []
    code, said = _on_a_terminal(relay_api.url, key, path, b"\n")
    assert code == 1 and "Submit 2 items with NO upper bound on their cost? [y/N] " in said, said
    assert _batches(relay_api.url, key) == []
    capped = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--max-cost", "0.5")
    assert capped.returncode == 0, capped.stderr
    assert cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--yes").returncode == 0
    assert len(_batches(relay_api.url, key)) == 2


def test_estimate_alone_stores_nothing_and_speaks_json_for_scripts(relay_api, make_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    path = _jsonl(tmp_path, *[PRICEY] * 2, CHAT)
    said = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--max-cost", "5")
    assert said.returncode == 0, said.stderr
    assert "cost: no upper bound (1 items have no output limit" in said.stdout  # CHAT has no max_tokens
    assert "spend cap $5" in said.stdout
    estimate = json.loads(cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--json").stdout)
    assert estimate["object"] == "batch.estimate" and estimate["total"] == 3 and estimate["cost_usd_max"] is None
    assert _batches(relay_api.url, key) == []


def _finished_mixed_batch(url: str, key: str, tmp_path: Path) -> str:
    done = cli(url, key, "submit", str(_jsonl(tmp_path, CHAT, {**CHAT, "model": "no-such-model"}, CHAT)),
               "--shape", "openai", "--wait", "--yes")
    assert done.returncode == 3, done.stderr  # one item discarded
    return done.stdout.splitlines()[0]


def test_rerun_makes_a_new_batch_of_the_discarded_items_and_says_what_it_is(relay_api, workers, make_key,  # type: ignore[no-untyped-def]
                                                                            tmp_path: Path) -> None:
    key = make_key()["key"]
    original = _finished_mixed_batch(relay_api.url, key, tmp_path)
    made = cli(relay_api.url, key, "rerun", original)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    new_id = lines[0].split()[1].rstrip(":")
    assert new_id != original and lines[0].startswith(f"batch {new_id}: ")
    assert lines[1].startswith("  1 items (relay API, shape openai)")
    assert f"re-run of {original}" in made.stdout
    assert made.stderr == f"re-running 1 items; follow with: relay batches status {new_id}\n"

    twice = cli(relay_api.url, key, "rerun", original)  # the item is in a re-run already: told which
    assert twice.returncode == 1 and twice.stderr.startswith("relay: rerun_exists: ") and new_id in twice.stderr
    until(lambda: cli(relay_api.url, key, "status", new_id, "--json").stdout.count('"finished": true'),
             timeout=30, what="the re-run to finish")
    again = cli(relay_api.url, key, "rerun", new_id, "--codes", "model_not_found", "--json", "--wait")
    assert again.returncode == 3, again.stderr  # the model still does not exist
    out = again.stdout.splitlines()
    assert out[1] == "completed=0 discarded=1 cancelled=0"
    batch = json.loads("\n".join(out[2:]))
    assert batch["rerun_of"] == new_id and batch["original_id"] == original and batch["total"] == 1
    assert batch["finished"]
    merged = [json.loads(line) for line in cli(relay_api.url, key, "results", original, "--merged").stdout.splitlines()]
    assert [(r["idx"], r["state"], r["attempts"]) for r in merged] == [(0, "completed", 1), (1, "discarded", 3),
                                                                       (2, "completed", 1)]


def test_rerun_errors_are_told_with_their_codes(relay_api, workers, make_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    original = _finished_mixed_batch(relay_api.url, key, tmp_path)
    nothing = cli(relay_api.url, key, "rerun", original, "--codes", "rate_limited,all_keys_failed")
    assert nothing.returncode == 1
    assert nothing.stderr.startswith("relay: nothing_to_rerun: nothing to re-run: ")
    assert "  error_codes.model_not_found: 1" in nothing.stderr.splitlines()  # what there is to re-run instead
    other = cli(relay_api.url, make_key()["key"], "rerun", original)
    assert other.returncode == 1 and other.stderr.startswith("relay: batch_not_found: ")
    bad = cli(relay_api.url, key, "rerun", original, "--codes", " , ")
    assert bad.returncode == 2 and "name at least one error code" in bad.stderr


def test_a_paced_batchs_status_shows_its_rate_and_expected_finish(relay_api, workers, make_key,  # type: ignore[no-untyped-def]
                                                                  tmp_path: Path) -> None:
    key = make_key("paced")["key"]
    # 400 items at 120 a minute: waiting for minutes, past the three CLI starts on a loaded machine (40 ended once).
    submitted = cli(relay_api.url, key, "submit", str(_jsonl(tmp_path, *[CHAT] * 400)), "--shape", "openai",
                    "--yes")
    assert submitted.returncode == 0, submitted.stderr
    assert "timing (your policy paces batches): paced (0.5 of the limits, 120 items/min): the last item starts in" \
        in submitted.stderr
    batch_id = submitted.stdout.splitlines()[0]
    try:
        status = cli(relay_api.url, key, "status", batch_id, "--limit", "0")
        line = status.stdout.splitlines()[3]
        assert line.startswith("  paced at 120 items/min (0.5 of the policy's limits), "), status.stdout
        assert " waiting, expected finish 20" in line and line.endswith("Z")
        shown = json.loads(cli(relay_api.url, key, "status", batch_id, "--json").stdout)["pacing"]
        assert shown["paced"] and shown["waiting_items"] > 0
    finally:
        cli(relay_api.url, key, "cancel", batch_id)


def test_the_progress_line_of_a_paced_batch_ends_with_its_rate_and_expected_finish() -> None:
    from app.commands.batch_views import progress_line

    batch: dict[str, Any] = {"total": 10, "counts": {"queued": 6, "running": 1, "completed": 3, "discarded": 0,
                                                     "cancelled": 0},
                             "pacing": {"paced": True, "share": 0.5, "items_per_minute": 120.0,
                                        "expected_finish_at": 1_800_000_000.0, "waiting_items": 6,
                                        "past_deadline": False}}
    assert progress_line(batch, width=10, rate=1.0).endswith(
        "running 1  queued 6  paced 120/min, finish 2027-01-15 08:00:00Z")
    late = {**batch, "pacing": {**batch["pacing"], "past_deadline": True, "expected_finish_at": None}}
    assert progress_line(late, rate=None).endswith("paced 120/min, finish - (past its deadline)")
    assert "paced" not in progress_line({**batch, "pacing": None}, rate=None)
