"""What a new user of the console looks for, in a real browser against a real `relay api` and `relay worker`: an
OpenAI batch input file submitted as it is (custom_ids kept, shown, searched, read item by item, downloaded), the
batch list's filters, search, names, source API and cost, delete, attribution by name, live views that outlive an
API restart, where the operator's items wait, the usage page's unknown costs, round ticks and cancelled items, and
a header without "Sign out" before signing in.

Screenshots go to test-artifacts/console/ (git-ignored); `console-features.png` is the one docs/console.png shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.batches.helpers import CHAT
from tests.console.browser import DESKTOP, Console
from tests.console.conftest import UNPRICED_MODEL, ConsoleWorld
from tests.console.test_console import LONG_ITEM_LIMIT, _batch_id, _submit

pytestmark = pytest.mark.integration


def _openai_file(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "openai-batch.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _line(custom_id: str, body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body, **changes}


def _relay_batch(world: ConsoleWorld, key: str, count: int, **envelope: Any) -> str:
    res = world.stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": [CHAT] * count,
                                                            **envelope})
    assert res.status_code == 202, res.get_data(as_text=True)
    return str(res.json["id"])


def test_an_openai_batch_input_file_goes_through_the_openai_api_and_keeps_its_custom_ids(
        console: Console, console_world: ConsoleWorld, tmp_path: Path) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console.sign_in(console_world.key()["key"])
    console.go("#/submit")
    assert "custom_id, method, url, body" in console.wait_text("#submit-expects", "OpenAI batch input file")
    lines = [_line(f"q-{i}", {**CHAT, "messages": [{"role": "user", "content": f"question {i}"}]}) for i in range(3)]
    lines.append(_line("q-lost", {**CHAT, "model": "no-such-model"}))
    _submit(console, _openai_file(tmp_path, lines))
    batch_id = _batch_id(console)
    console.wait_text(".lead", "State: done")
    assert "created through the OpenAI API" in console.text(".lead")
    assert [c.text for c in console.all("tbody td.custom-id")] == ["q-0", "q-1", "q-2", "q-lost"]

    console.first("#custom-id").send_keys("q-l")
    console.first("#item-search button[type=submit]").click()
    console.wait(lambda: [c.text for c in console.all("tbody td.custom-id")] == ["q-lost"], "the custom_id search")
    assert "custom_id=q-l" in console.driver.execute_script("return location.hash")
    console.go(f"#/batches/{batch_id}")
    console.wait(lambda: len(console.all("tbody td.custom-id")) == 4, "every item again")
    console.first('[data-view="1"]').click()
    view = console.wait_text("#item-view", "Response")
    assert "Item 1" in view and "q-1" in view and "question 1" in view and "chat.completion" in view
    console.driver.execute_script("window.scrollTo(0, 0)")
    console.screenshot("console-features", (DESKTOP[0], 1600))  # the whole page (docs/console.png)
    console.viewport(DESKTOP)

    console.first('[data-download="json"]').click()
    results = json.loads(console.downloaded(f"batch-{batch_id}.json").read_text())["results"]
    assert [(r["custom_id"], r["state"]) for r in results] == [("q-0", "completed"), ("q-1", "completed"),
                                                               ("q-2", "completed"), ("q-lost", "discarded")]


def test_every_problem_of_an_openai_input_file_is_listed_by_line_at_once(console: Console,
                                                                        console_world: ConsoleWorld,
                                                                        tmp_path: Path) -> None:
    console.sign_in(console_world.key()["key"])
    lines = [_line("a", CHAT), _line("a", CHAT), _line("b", {"model": "gpt-4o-mini"}), _line("c", CHAT, method="GET")]
    _submit(console, _openai_file(tmp_path, lines))
    console.wait_text("#submit-result", "invalid_batch")
    problems = [li.text for li in console.all("#submit-result .problems li")]
    assert problems[0].startswith("line 2 (custom_id a) · custom_id: is used by an earlier line")
    assert any(p.startswith("line 3 (custom_id b) · body.messages: ") for p in problems)
    assert any(p.startswith("line 4 (custom_id c) · method: must be POST") for p in problems)
    assert console.driver.execute_script("return location.hash") == "#/submit"  # nothing was submitted


def test_the_list_filters_by_state_searches_metadata_and_shows_name_api_and_cost_and_a_batch_its_names(
        console: Console, console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key()
    nightly = _relay_batch(console_world, key["key"], 2, metadata={"name": "Nightly evals"})
    console_world.stack.wait_finished(key["key"], nightly)
    console_world.stop_workers()  # cancelled before anything runs it
    stopped = _relay_batch(console_world, key["key"], 1, metadata={"name": "weekly"})
    assert console_world.stack.call(key["key"], "POST", f"/v1/batches/{stopped}/cancel").status_code == 200
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console.sign_in(key["key"])
    row = console.wait_for(f'tr[data-batch="{nightly}"]')
    assert row.find_element(By.CSS_SELECTOR, ".batch-name").text == "Nightly evals"
    assert row.find_element(By.CSS_SELECTOR, "td[data-api]").text == "Relay"
    console.wait(lambda: console.first(f'tr[data-batch="{nightly}"] td.cost').text.startswith("$0.0"), "its cost")
    console.go("#/batches?state=cancelled")
    console.wait(lambda: console.all(f'tr[data-batch="{stopped}"]') and not console.all(f'tr[data-batch="{nightly}"]'),
                 "only the cancelled batch")
    console.go("#/batches")
    console.wait_for(f'tr[data-batch="{stopped}"]')
    console.first("#f-search").send_keys("NIGHTLY")
    console.first("#batch-filters button[type=submit]").click()
    console.wait(lambda: console.all(f'tr[data-batch="{nightly}"]') and not console.all(f'tr[data-batch="{stopped}"]'),
                 "only the batch whose metadata says nightly")
    console.go("#/batches?search=no-batch-says-this")
    assert console.wait_text("#caller-batches", "No batch matches these filters.")

    console.go(f"#/batches/{nightly}")
    attribution = console.wait_text("#attribution", "batch-svc")
    assert "main" in attribution and "p-batch" in attribution and "t-batch" in attribution
    assert key["prefix"] in attribution  # the credential by its name, or its prefix when unnamed
    policy = console.first("#attribution [data-id]")
    assert policy.text == "main" and len(policy.get_attribute("title")) == 36  # its id, on hover
    cost = console.text("#batch-cost")
    assert "$0.0" in cost and "Tokens in" in cost and "Tokens out" in cost
    assert console.first("h1").text == "Batch Nightly evals"


def test_a_finished_batch_is_deleted_after_confirmation(console: Console, console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key()["key"]
    batch_id = _relay_batch(console_world, key, 1)
    console_world.stack.wait_finished(key, batch_id)
    console.sign_in(key)
    console.go(f"#/batches/{batch_id}")
    console.wait_text(".lead", "State: done")
    console.wait(lambda: console.first("#delete-batch").is_enabled(), "delete enabled")
    console.first("#delete-batch").click()
    dialog = console.wait_for("dialog#confirm")
    assert "removed for good" in dialog.text
    dialog.find_element(By.CSS_SELECTOR, "button[value=yes]").click()
    console.wait_text("main .notice", f"Deleted batch {batch_id}.")
    assert console.driver.execute_script("return location.hash").startswith("#/batches?deleted=")
    assert console_world.stack.call(key, "GET", f"/v1/batches/{batch_id}").status_code == 404


def test_live_views_outlive_an_api_restart_and_say_what_they_are_doing(console: Console,
                                                                      console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console_world.upstream.control("sk-batch-slow", latency_ms=8_000)
    try:
        key = console_world.key("slow")["key"]
        console.sign_in(key)
        batch_id = _relay_batch(console_world, key, 4)
        console.go(f"#/batches/{batch_id}")
        console.wait_text(".lead", "State: running")
        console.driver.execute_script("window.sameDocument = true")
        console_world.stop_api()
        trouble = console.wait_text("#connection", "Relay does not answer")
        assert "Trying again in" in trouble and "updates itself" in trouble
        assert "State: running" in console.text(".lead")  # the page keeps what it shows
        console.screenshot("api-restart", DESKTOP)
        console_world.start_api_again()
        console.wait_text("#connection", "Relay answers again")
        console.wait_text(".lead", "State: done", timeout=90)
        assert console.driver.execute_script("return window.sameDocument === true")  # nobody reloaded the page
    finally:
        console_world.upstream.forget("sk-batch-slow")


def test_the_operator_page_says_where_items_wait_and_when_no_batch_matches(console: Console,
                                                                          console_world: ConsoleWorld) -> None:
    console_world.stop_workers()
    try:
        _relay_batch(console_world, console_world.key()["key"], 5)
        items = console_world.stack.admin("GET", "/admin/workers").json["items"]
        assert items["queued"] >= 5 and items["unpublished"] >= 5  # no worker: nothing was published
        console.sign_in(console_world.stack.settings.admin_token)
        waiting = console.wait_text("#items-waiting", "queued in Postgres")
        assert f"{items['queued']} items queued in Postgres ({items['unpublished']} not yet published to RabbitMQ)" \
            in waiting
        assert "not the backlog" in waiting
        console.go("#/operator?search=no-batch-says-this")
        assert console.wait_text("#operator-batches", "No batch matches these filters.")
    finally:
        console_world.ensure_worker(**LONG_ITEM_LIMIT)


def test_the_usage_page_tells_unknown_costs_round_ticks_and_cancelled_items_apart(console: Console,
                                                                                 console_world: ConsoleWorld) -> None:
    key = console_world.key()["key"]
    console_world.stop_workers()
    cancelled = _relay_batch(console_world, key, 3)
    assert console_world.stack.call(key, "POST", f"/v1/batches/{cancelled}/cancel").status_code == 200
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console_world.upstream.control("sk-batch-ok", usage={"input_tokens": 0, "output_tokens": 18_500})  # $0.0111
    try:
        priced = _relay_batch(console_world, key, 1)
        free = console_world.stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": [
            {**CHAT, "model": UNPRICED_MODEL}]}).json["id"]
        for batch_id in (priced, free):
            console_world.stack.wait_finished(key, batch_id)
    finally:
        console_world.upstream.forget("sk-batch-ok")
    console.sign_in(key)
    console.go("#/usage")
    lead = console.wait_text("main .lead", "5 requests")
    assert "1 unpriced" in lead and "3 cancelled" in lead
    labels = [t.text for t in console.all("svg.chart text.tick")]
    assert labels == ["$0.000", "$0.005", "$0.010", "$0.015"]  # the top tick is above the 0.0111 peak
    rows = {r.get_attribute("data-model"): r for r in console.all("main tbody tr")}
    assert rows[UNPRICED_MODEL].find_element(By.CSS_SELECTOR, "td.cost").text == "unpriced"
    gpt = rows["gpt-4o-mini"]
    assert gpt.find_element(By.CSS_SELECTOR, "td.cost").text == "0.011100000"
    assert (gpt.find_element(By.CSS_SELECTOR, "td.errors").text,
            gpt.find_element(By.CSS_SELECTOR, "td.cancelled").text) == ("0", "3")
    console.screenshot("usage-features", DESKTOP)


def test_sign_out_is_offered_only_while_signed_in(console: Console, console_world: ConsoleWorld) -> None:
    console.sign_out()
    console.wait_for("#secret")
    assert not console.first("#sign-out").is_displayed()
    console.sign_in(console_world.key()["key"])
    assert console.first("#sign-out").is_displayed()
