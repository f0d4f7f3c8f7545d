"""Re-runs, estimates, spend caps and pacing in the console, in a real browser against a real `relay api` and
`relay worker`: the submit page shows the estimate before Submit is pressed (and takes a spend cap), a paced
batch's page shows its rate and expected finish, and a finished batch's failed items are re-run from a button,
every discarded item or only the error codes chosen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.batches.helpers import CHAT
from tests.console.browser import DESKTOP, Console
from tests.console.conftest import ConsoleWorld
from tests.console.test_console import BAD_MODEL, LONG_ITEM_LIMIT, _batch_id
from tests.console.test_console_features import _relay_batch

pytestmark = pytest.mark.integration

PRICEY = {**CHAT, "max_tokens": 1000}  # a bound of about $0.0006 an item at the test catalog's prices


def _choose(console: Console, path: Any, max_cost: str | None = None) -> None:
    console.go("#/submit")
    console.wait_for("#file").send_keys(str(path))
    if max_cost is not None:
        console.first("#max-cost").send_keys(max_cost)


def test_the_submit_page_shows_the_estimate_before_submit_is_pressed_and_takes_a_spend_cap(
        console: Console, console_world: ConsoleWorld, jsonl_file: Any) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key()["key"]
    console.sign_in(key)
    _choose(console, jsonl_file([PRICEY, PRICEY, PRICEY, BAD_MODEL]), max_cost="0.001")
    cost = console.wait_text("#estimate-cost", "4 items: cost at most $0.00")
    assert console.wait_text("#estimate-cap", "Spend cap $0.001: the cap may stop the batch")  # a bound of ~$0.0018
    rows = {r.get_attribute("data-model"): r.text for r in console.all("#submit-estimate tbody tr")}
    assert rows["gpt-4o-mini"].split()[:4] == ["gpt-4o-mini", "3", "openai", "/"] and "$0.00" in rows["gpt-4o-mini"]
    assert "not run: model_not_found" in rows["no-such-model"]
    assert "no rate limits" in console.text("#estimate-timing")
    assert "Nothing is stored or run until you press Submit" in console.text("#submit-estimate")
    listed = console_world.stack.call(key, "GET", "/v1/batches", query_string={"format": "relay"}).json
    assert listed["data"] == [] and cost  # nothing submitted by the estimate
    console.screenshot("submit-estimate", (DESKTOP[0], 1200))
    console.viewport(DESKTOP)

    console.first("#submit-form button[type=submit]").click()
    batch_id = _batch_id(console)
    assert console.wait_text("#batch-cap", "Spend cap $0.001")
    assert console_world.stack.read(key, batch_id, format="relay")["max_cost"] == 0.001


def test_an_unbounded_estimate_says_why_and_a_bad_file_is_told_before_submitting(console: Console,
                                                                               console_world: ConsoleWorld,
                                                                               tmp_path: Path) -> None:
    console.sign_in(console_world.key()["key"])
    unbounded, bad = tmp_path / "unbounded.jsonl", tmp_path / "bad.jsonl"
    unbounded.write_text(f"{json.dumps(CHAT)}\n{json.dumps(PRICEY)}\n")
    bad.write_text(f"{json.dumps(CHAT)}\n\n{json.dumps({'model': 'gpt-4o-mini'})}\n")
    _choose(console, unbounded)
    said = console.wait_text("#estimate-cost", "the cost has no upper bound")
    assert "1 item has no output limit" in said
    console.first("#file").send_keys(str(bad))  # another file: the estimate follows
    problems = console.wait_text("#submit-estimate", "invalid_batch")
    assert "item 1 (line 3)" in problems and "messages" in problems


def test_a_paced_batch_shows_its_pacing_in_the_estimate_and_its_rate_and_expected_finish_on_its_page(
        console: Console, console_world: ConsoleWorld, jsonl_file: Any) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key("paced")["key"]
    console.sign_in(key)
    _choose(console, jsonl_file([CHAT] * 40))
    timing = console.wait_text("#estimate-timing", "Your policy paces batches.")
    assert "Paced (0.5 of the limits, 120 items/min): the last item starts in about " in timing
    assert "Not paced: every item starts at once" in timing
    console.first("#submit-form button[type=submit]").click()
    batch_id = _batch_id(console)
    try:
        pacing = console.wait_text("#pacing", "Paced at 120 items/min")
        assert "(0.5 of the policy's limits, the rest is kept for live calls)" in pacing
        assert "items waiting, expected to have started by 20" in pacing  # a time in the viewer's zone
        assert console.first("#pacing time").get_attribute("datetime").endswith("Z")
        console.screenshot("batch-paced", DESKTOP)
    finally:
        console_world.stack.call(key, "POST", f"/v1/batches/{batch_id}/cancel")


def test_a_finished_batchs_failed_items_are_rerun_from_a_button_by_error_code(console: Console,
                                                                            console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key()["key"]
    done = _relay_batch(console_world, key, 1)
    res = console_world.stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": [
        CHAT, BAD_MODEL, {**CHAT, "model": "retired"}, CHAT]})
    original = str(res.json["id"])
    for batch_id in (done, original):
        console_world.stack.wait_finished(key, batch_id)
    console.sign_in(key)
    console.go(f"#/batches/{done}")
    console.wait_text(".lead", "State: done")
    assert not console.wait_for("#rerun-batch").is_enabled()  # every item completed: nothing to re-run

    console.go(f"#/batches/{original}")
    console.wait_text(".lead", "State: done")
    console.wait(lambda: console.first("#rerun-batch").is_enabled(), "re-run enabled")
    console.first("#rerun-batch").click()
    dialog = console.wait_for("dialog#confirm")
    assert "Every discarded item (2)" in dialog.text
    assert "model_not_found — 1 discarded" in dialog.text and "no_binding — 1 discarded" in dialog.text
    dialog.find_element(By.CSS_SELECTOR, '[data-code="model_not_found"]').click()
    assert dialog.find_element(By.CSS_SELECTOR, "#rerun-codes").is_selected()
    console.screenshot("rerun-dialog", DESKTOP)
    dialog.find_element(By.CSS_SELECTOR, "button[value=yes]").click()
    new_id = console.wait(lambda: (b := _batch_id(console)) != original and b, "the new batch's page")
    assert console.wait_text("#rerun-of", original)
    made = console_world.stack.read(key, new_id, format="relay")
    assert made["rerun_of"] == original and made["total"] == 1
    assert [i["source_idx"] for i in made["items"]] == [1]  # only the item of the code chosen

    console.go(f"#/batches/{original}")
    console.wait(lambda: console.first("#rerun-batch").is_enabled(), "re-run enabled")
    console.first("#rerun-batch").click()
    console.wait_for("dialog#confirm button[value=yes]").click()  # every discarded item, the default
    again = console.wait(lambda: (b := _batch_id(console)) not in (original, new_id) and b, "another new batch")
    assert console_world.stack.read(key, again, format="relay")["total"] == 2
