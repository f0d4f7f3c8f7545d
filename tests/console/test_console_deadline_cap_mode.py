"""The deadline and the spend cap's mode in the console, in a real browser against a real `relay api`: the submit
form takes a deadline (the batch's `completion_window`), its estimate warns how many items would start too late,
the submit sends it; a batch's page says how its spend cap holds (hard or soft) and what may pass it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.batches.helpers import CHAT
from tests.console.browser import Console
from tests.console.conftest import ConsoleWorld
from tests.console.test_console import _batch_id
from tests.console.test_console_features import _relay_batch
from tests.console.test_console_rerun_estimate import PRICEY

pytestmark = pytest.mark.integration


def _deadline(console: Console, text: str) -> None:
    field = console.first("#deadline")
    field.clear()
    field.send_keys(text)


def test_the_submit_form_takes_a_deadline_and_its_estimate_warns_of_the_items_that_would_be_late(
        console: Console, console_world: ConsoleWorld, jsonl_file: Any) -> None:
    key = console_world.key("paced")["key"]  # 120 batch items a minute
    console.sign_in(key)
    console.go("#/submit")
    console.wait_for("#file").send_keys(str(jsonl_file([CHAT] * 40)))
    console.wait_text("#estimate-timing", "Your policy paces batches.")
    assert not console.all("#estimate-deadline")  # no deadline asked, no verdict
    _deadline(console, "5s")
    late = console.wait_text("#estimate-deadline", "would start too late")
    assert late.startswith("Deadline 5s: ") and " of 40 items would start too late and end discarded expired (the" \
        " last would start in about " in late, late
    assert "warning" in (console.first("#estimate-deadline").get_attribute("class") or "")
    _deadline(console, "1h")
    assert console.wait_text("#estimate-deadline", "Deadline 1h: every item can start within it.")
    assert "warning" not in (console.first("#estimate-deadline").get_attribute("class") or "")
    _deadline(console, "soon")
    assert "completion_window" in console.wait_text("#submit-estimate", "invalid_batch")  # the API's 400, shown

    _deadline(console, "1h")
    console.wait_text("#estimate-deadline", "Deadline 1h")
    console.first("#submit-form button[type=submit]").click()
    batch_id = _batch_id(console)
    assert console_world.stack.read(key, batch_id, format="relay")["completion_window"] == "1h"
    assert console.wait_text("main", "(1h)")  # the batch page's deadline
    console_world.stack.call(key, "POST", f"/v1/batches/{batch_id}/cancel")


def test_an_openai_input_file_with_a_deadline_is_told_that_the_deadline_is_for_relays_format(
        console: Console, console_world: ConsoleWorld, jsonl_file: Any) -> None:
    console.sign_in(console_world.key()["key"])
    console.go("#/submit")
    console.wait_for("#file").send_keys(str(jsonl_file([{"custom_id": "a", "method": "POST",
                                                          "url": "/v1/chat/completions", "body": CHAT}])))
    _deadline(console, "2h")
    said = console.wait_text("#submit-estimate", "completion_window_not_supported")
    assert "a deadline is for Relay's format" in said


def test_a_batchs_page_says_how_its_spend_cap_holds(console: Console, console_world: ConsoleWorld) -> None:
    key = console_world.key()["key"]
    console.sign_in(key)
    soft = _relay_batch(console_world, key, 2, max_cost=5, max_cost_mode="soft")
    console.go(f"#/batches/{soft}")
    said = console.wait_text("#batch-cap", "Spend cap $5")
    assert said.startswith("Spend cap $5.00 (soft): once reached, items not started end discarded"), said
    assert "Past the cap: the cost of the items in flight when the cap is reached" in said
    hard = console_world.stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": [PRICEY],
                                                                       "max_cost": 5}).json["id"]
    console.go(f"#/batches/{hard}")
    said = console.wait_text("#batch-cap", "(hard)")
    assert "Past the cap: none: each item's cost bound is reserved before it starts." in said
    for batch_id in (soft, hard):
        console_world.stack.call(key, "POST", f"/v1/batches/{batch_id}/cancel")
