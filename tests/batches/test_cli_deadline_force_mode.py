"""`relay batches` for the estimate's deadline verdict, `rerun --force` and the spend cap's mode, run for real
against a real API and real workers: the estimate (alone and before a submit) says whether the items can start
within `--completion-window` and how many would not; a second re-run of the same items is refused naming the first
and `--force`, and made with it; `--max-cost-mode` is sent and the status shows the cap's mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.batches.helpers import CHAT
from tests.batches.test_cli_output import _jsonl, cli
from tests.batches.test_cli_rerun_estimate import PRICEY, _batches, _finished_mixed_batch

pytestmark = pytest.mark.integration


def test_the_estimate_warns_how_many_items_would_start_past_the_completion_window(relay_api, make_key,  # type: ignore[no-untyped-def]
                                                                                  tmp_path: Path) -> None:
    key = make_key("paced")["key"]  # 120 batch items a minute
    path = _jsonl(tmp_path, *[CHAT] * 40)
    late = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--completion-window", "5s")
    assert late.returncode == 0, late.stderr
    said = [line for line in late.stdout.splitlines() if line.startswith("  deadline ")]
    assert len(said) == 1, late.stdout
    assert said[0].startswith("  deadline 5s: WARNING: ") and "items would start too late and end discarded" \
        " `expired` (the last would start in about 0:" in said[0], said[0]
    late_items = int(said[0].split("WARNING: ")[1].split()[0])
    verdict = json.loads(cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--completion-window",
                             "5s", "--json").stdout)["deadline"]
    assert 0 < late_items < 40 and 0 < verdict["items_late"] < 40 and verdict["meets"] is False  # a window's worth
    # of items start at once, the rest at the paced rate (the count moves with the clock between the two calls)
    roomy = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--completion-window", "1h")
    assert "  deadline 1h: every item can start within it" in roomy.stdout.splitlines(), roomy.stdout
    bare = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai")
    assert bare.returncode == 0 and "deadline" not in bare.stdout


def test_submit_shows_the_deadline_verdict_before_it_submits(relay_api, make_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = make_key("paced")["key"]
    path = _jsonl(tmp_path, *[PRICEY] * 40)
    refused = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--completion-window", "5s",
                  "--confirm-above", "0.000001")
    assert refused.returncode == 1, refused.stderr
    assert "  deadline 5s: WARNING: " in refused.stderr and "end discarded `expired`" in refused.stderr
    assert _batches(relay_api.url, key) == []


def test_a_second_rerun_of_the_same_items_names_the_first_and_force_makes_it(relay_api, workers, make_key,  # type: ignore[no-untyped-def]
                                                                            tmp_path: Path) -> None:
    key = make_key()["key"]
    original = _finished_mixed_batch(relay_api.url, key, tmp_path)
    first = cli(relay_api.url, key, "rerun", original, "--json")
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.splitlines()[0]
    twice = cli(relay_api.url, key, "rerun", original)
    assert twice.returncode == 1
    err = twice.stderr.splitlines()
    assert err[0] == (f"relay: rerun_exists: batch {original} already has a re-run of these 1 items: {first_id};"
                      f" see it with `relay batches status {first_id}`, or pass --force to run them again")
    assert "send \"force\"" not in twice.stderr and f"  rerun_id: {first_id}" in err
    assert len(_batches(relay_api.url, key)) == 2
    forced = cli(relay_api.url, key, "rerun", original, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    forced_id = forced.stdout.splitlines()[0]
    assert forced_id not in (first_id, original)
    assert json.loads(cli(relay_api.url, key, "status", forced_id, "--json").stdout)["rerun_of"] == original
    assert len(_batches(relay_api.url, key)) == 3


def test_max_cost_mode_is_sent_estimated_and_shown_with_the_spend_cap(relay_api, make_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    path = _jsonl(tmp_path, PRICEY, CHAT)  # CHAT has no output limit: a hard cap cannot run it
    soft = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--max-cost", "5",
               "--max-cost-mode", "soft", "--json")
    assert soft.returncode == 0, soft.stderr
    assert json.loads(soft.stdout)["max_cost_mode"] == "soft"
    said = cli(relay_api.url, key, "estimate", str(path), "--shape", "openai", "--max-cost", "5",
               "--max-cost-mode", "soft")
    assert "spend cap $5 (soft)" in said.stdout, said.stdout
    submitted = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--max-cost", "5",
                    "--max-cost-mode", "soft")
    assert submitted.returncode == 0, submitted.stderr
    batch_id = submitted.stdout.splitlines()[0]
    shown = json.loads(cli(relay_api.url, key, "status", batch_id, "--json").stdout)
    assert shown["max_cost_mode"] == "soft"
    status = cli(relay_api.url, key, "status", batch_id, "--limit", "0").stdout
    assert "spend cap $5 (soft: items in flight may pass it)" in status, status
    hard = cli(relay_api.url, key, "submit", str(_jsonl(tmp_path, PRICEY)), "--shape", "openai", "--max-cost", "5")
    hard_id = hard.stdout.splitlines()[0]
    assert "spend cap $5 (hard: never passed)" in cli(relay_api.url, key, "status", hard_id, "--limit", "0").stdout
    bad = cli(relay_api.url, key, "submit", str(path), "--shape", "openai", "--max-cost-mode", "loose")
    assert bad.returncode == 2 and "invalid choice: 'loose'" in bad.stderr
