"""The web console in a real browser (Debian's headless Chromium via Selenium) against a real `relay api` and
`relay worker`: sign in, submit a file, watch it finish, read a discarded item's error, download the results,
cancel a running batch, the operator view, usage, access rules, and the pages' headers.

Screenshots go to test-artifacts/console/ (git-ignored)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import requests
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.batches.helpers import CHAT
from tests.console.browser import BROWSER_TZ, DESKTOP, PHONE, Console
from tests.console.conftest import BROKER_UI, ConsoleWorld

pytestmark = pytest.mark.integration

BAD_MODEL = {**CHAT, "model": "no-such-model"}
LONG_ITEM_LIMIT = {"batch_item_time_limit_s": 300}


def _progress(console: Console) -> tuple[int, int]:
    bar = console.first(".progress")
    return int(bar.get_attribute("data-done") or -1), int(bar.get_attribute("data-total") or -1)


def _batch_id(console: Console) -> str:
    return str(console.wait(lambda: (h := console.driver.execute_script("return location.hash"))
                            .startswith("#/batches/") and h.split("/")[2].split("?")[0], "a batch page"))


def _submit(console: Console, path: Any, shape: str = "openai") -> None:
    console.go("#/submit")
    console.wait_for("#file").send_keys(str(path))
    Select(console.first("#shape")).select_by_value(shape)
    # Pressed once the estimate is shown, as a user does: the estimate appears above the button 0.3 s after the form
    # changes, and a click while it moves the button may land beside it (a clean clone's .ci/run once found the
    # page unsubmitted).
    console.wait(lambda: _estimate_shown(console), "the estimate")
    console.first("#submit-form button[type=submit]").click()


def _estimate_shown(console: Console) -> bool:
    region = console.first("#submit-estimate")
    return region.is_displayed() and bool(region.text) and "Estimating" not in region.text


def _local(iso: str) -> str:
    """ISO time as the console shows it in the browser's zone."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(BROWSER_TZ)).strftime(
        "%Y-%m-%d %H:%M:%S")


def test_a_caller_submits_a_file_watches_it_finish_reads_the_discarded_error_and_downloads_results(
        console: Console, console_world: ConsoleWorld, jsonl_file: Any) -> None:
    console_world.stop_workers()
    key = console_world.key()
    console.sign_in(key["key"])
    assert console.driver.get_cookies() == []  # the secret is kept in the tab, never in a cookie
    assert console.driver.execute_script("return sessionStorage.getItem('relay.console.secret')") == key["key"]
    assert console.text("#who") == f"Signed in with a relay key ({key['key'][:7]}…)"
    _submit(console, jsonl_file([CHAT, BAD_MODEL, CHAT, CHAT]))
    batch_id = _batch_id(console)
    console.wait_text(".lead", "State: queued")  # no worker yet: nothing can have run
    assert _progress(console) == (0, 4) and "queued 4" in console.text(".progress-text")
    console.screenshot("batch-queued")
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console.wait_text(".lead", "State: done")  # the page updates itself; nobody reloads it
    assert _progress(console) == (4, 4)
    text = console.text(".progress-text")
    assert "100% · 4/4 final" in text and "completed 3" in text and "discarded 1" in text
    batch = console_world.stack.call(key["key"], "GET", f"/v1/batches/{batch_id}").json
    assert console.text("time") == _local(batch["created_at"])  # the viewer's zone, not the server's
    assert BROWSER_TZ in console.text("#zone")

    console.first('a.filter[href$="?state=discarded"]').click()
    console.wait_text("main", "discarded items")
    rows = console.all("tbody tr")
    assert len(rows) == 1 and rows[0].find_element(By.CSS_SELECTOR, "td").text == "1"
    console.first("details summary").click()
    assert console.wait_text("details .error-text", "no-such-model")
    console.screenshot("batch-discarded-error", DESKTOP)

    console.first('[data-download="json"]').click()
    results = json.loads(console.downloaded(f"batch-{batch_id}.json").read_text())["results"]
    assert [r["state"] for r in results] == ["completed", "discarded", "completed", "completed"]
    assert "no-such-model" in results[1]["error"] and results[0]["response"]["object"] == "chat.completion"
    console.first('[data-download="jsonl"]').click()
    lines = console.downloaded(f"batch-{batch_id}.jsonl").read_text().splitlines()
    assert [json.loads(line)["idx"] for line in lines] == [0, 1, 2, 3]
    console.wait_text("[role=status]", "Saved")
    assert not console.first("#cancel-batch").is_enabled()  # a finished batch has nothing to cancel

    console.go("#/batches")
    row = console.wait_for(f'tr[data-batch="{batch_id}"]')
    assert "done" in row.text and "100% · 4/4 final" in row.text
    console.screenshot("batches-list", DESKTOP)


def test_a_whole_batch_validation_error_lists_every_bad_item_by_index(console: Console, console_world: ConsoleWorld,
                                                                      jsonl_file: Any) -> None:
    console.sign_in(console_world.key()["key"])
    _submit(console, jsonl_file([CHAT, {"model": "gpt-4o-mini"}, CHAT, {"messages": []}]))
    console.wait_text("#submit-result", "invalid_batch")
    problems = [li.text for li in console.all("#submit-result .problems li")]
    assert len(problems) >= 2
    assert problems[0].startswith("item 1 (line 3) · ") and "messages" in problems[0]
    assert any(p.startswith("item 3 (line 7) · ") for p in problems)
    console.screenshot("submit-validation-errors", DESKTOP)
    assert console.driver.execute_script("return location.hash") == "#/submit"  # nothing was submitted


def test_a_running_batch_is_cancelled_only_after_confirmation(console: Console, console_world: ConsoleWorld,
                                                              jsonl_file: Any) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console_world.upstream.control("sk-batch-slow", latency_ms=120_000)
    try:
        console.sign_in(console_world.key("slow")["key"])
        _submit(console, jsonl_file([CHAT] * 8))
        _batch_id(console)
        console.wait_text(".lead", "State: running")
        console.wait(lambda: "running 4" in console.text(".progress-text"), "four items running")
        console.first("#cancel-batch").click()
        dialog = console.wait_for("dialog#confirm")
        assert "cannot be undone" in dialog.text
        console.screenshot("cancel-confirmation", DESKTOP)
        dialog.find_element(By.CSS_SELECTOR, "button[value=no]").click()  # keep it running
        assert not dialog.is_displayed() and "State: running" in console.text(".lead")
        console.first("#cancel-batch").click()
        console.wait_for("dialog#confirm button[value=yes]").click()
        told = console.wait_text("#action-status", "Batch cancelled: ")
        said = re.fullmatch(r"Batch cancelled: (\d+) cancelled, (\d+) running being stopped \(they end cancelled\), "
                            r"(\d+) had already ended \(completed (\d+), discarded (\d+)\)\.", told)
        assert said and sum(map(int, said.groups()[:3])) == 8, told  # the counts' words, adding up to the batch
        console.wait_text(".lead", "State: cancelled")
        console.wait(lambda: _progress(console) == (8, 8), "every item final")
        assert "cancelled 8" in console.text(".progress-text")
        assert not console.first("#cancel-batch").is_enabled()
    finally:
        console_world.upstream.forget("sk-batch-slow")


def test_amounts_are_in_dollars_with_sensible_precision_never_in_exponent_notation(console: Console) -> None:
    console.open()
    shown = console.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('/console/ui.js').then((m) => done([7.5e-7, 0.000123456, 0.5, 0.0018, 12.345, 0, null].map(m.usd)));")
    assert shown == ["$0.00000075", "$0.000123", "$0.50", "$0.0018", "$12.35", "$0", "unpriced"]


def test_another_callers_batch_is_not_found_and_not_listed(console: Console, console_world: ConsoleWorld) -> None:
    owner = console_world.key()
    batch_id = console_world.stack.submit(owner["key"], "console-private", 1)
    console.sign_in(console_world.token("other-user")["token"])
    assert console.text("#who").startswith("Signed in with an inference token (rt_")
    console.go(f"#/batches/{batch_id}")
    console.wait_text("main .error", "batch_not_found")
    assert "another caller" in console.text("main")
    console.go("#/batches")
    console.wait_text("main", "Newest first")
    console.wait(lambda: console.all("main table") or console.all("main .empty"), "the list")
    assert not console.all(f'tr[data-batch="{batch_id}"]')
    console.go("#/operator")
    console.wait_text("main", "needs the admin token")


def test_a_refused_credential_is_told_on_the_sign_in_page(console: Console, console_world: ConsoleWorld) -> None:
    revoked = console_world.key()
    assert console_world.stack.admin("POST", f"/admin/relay-keys/{revoked['id']}/revoke").status_code == 200
    console.sign_out()
    console.wait_for("#secret").send_keys(revoked["key"] + Keys.ENTER)  # the keyboard alone signs in
    console.wait_text("main .error", "key_revoked")
    assert console.driver.execute_script("return sessionStorage.length") == 0


def test_the_operator_view_shows_workers_the_queue_and_every_batch_with_filters(
        console: Console, console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    mine = console_world.stack.submit(console_world.key()["key"], "console-op-a", 2)
    theirs = console_world.stack.submit(console_world.token("other-user")["token"], "console-op-b", 2)
    console_world.stop_workers()  # cancelled before a worker takes an item
    stopped = console_world.stack.submit(console_world.key("failing")["key"], "console-op-c", 2)
    console_world.stack.admin("POST", f"/admin/batches/{stopped}/cancel")
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    console.sign_in(console_world.stack.settings.admin_token)
    assert console.text("#who") == "Signed in with the admin token"
    console.wait_text("#workers-alive", "1 of 1")
    queue = console.wait_text("#queue-depth", "waiting")
    assert console_world.stack.settings.queue_name in queue and "consumer" in queue
    link = console.first(f'a[href="{BROKER_UI}"]')
    assert link.text == "Open the RabbitMQ management UI" and link.get_attribute("rel") == "noopener noreferrer"
    assert "alive" in console.text("#fleet tbody")
    for batch_id in (mine, theirs, stopped):
        console.wait_for(f'#operator-batches tr[data-batch="{batch_id}"]')
    assert "other-user" in console.first(f'tr[data-batch="{theirs}"]').text
    console.screenshot("operator", DESKTOP)

    console.first("#f-principal").send_keys("other-user")
    console.first("#operator-filters button[type=submit]").click()
    console.wait(lambda: not console.all(f'tr[data-batch="{mine}"]') and console.all(f'tr[data-batch="{theirs}"]'),
                 "only other-user's batches")
    console.go("#/operator?state=cancelled")
    console.wait(lambda: console.all(f'tr[data-batch="{stopped}"]') and not console.all(f'tr[data-batch="{mine}"]'),
                 "only the cancelled batch")
    console.first(f'tr[data-batch="{stopped}"] a').click()
    console.wait_text(".lead", "State: cancelled")
    assert "cancelled 2" in console.text(".progress-text")  # read through the admin route: not the admin's batch
    console.go("#/operator?credential=not-an-id")
    assert "credential: Not a valid UUID." in console.wait_text("#operator-batches .error", "invalid_request")


def test_the_usage_page_charts_cost_per_day_by_model(console: Console, console_world: ConsoleWorld) -> None:
    console_world.ensure_worker(**LONG_ITEM_LIMIT)
    key = console_world.key()
    batch_id = console_world.stack.submit(key["key"], "console-usage", 3)
    console_world.stack.wait_finished(key["key"], batch_id)
    console.sign_in(key["key"])
    console.go("#/usage")
    console.wait_text("main .lead", "3 requests")
    assert console.all("svg.chart rect.bar-seg")
    assert "gpt-4o-mini" in console.text(".legend")
    row = console.first("main tbody tr").text
    assert "gpt-4o-mini" in row and " 3 " in f" {row} "
    console.screenshot("usage", DESKTOP)
    Select(console.first("#metric")).select_by_value("requests")
    console.first("#usage-form button[type=submit]").click()
    console.wait(lambda: "metric=requests" in console.driver.current_url, "the requests chart")
    console.wait_text("svg.chart", "3")
    Select(console.first("#source")).select_by_value("live")
    console.first("#usage-form button[type=submit]").click()
    console.wait_text("main", "No usage in this period.")


def test_pages_fit_a_phone_and_work_from_the_keyboard(console: Console, console_world: ConsoleWorld) -> None:
    key = console_world.key()
    console_world.stack.submit(key["key"], "console-phone", 2)
    console.sign_out()
    console.viewport(PHONE)
    try:
        console.wait_for("#secret").send_keys(key["key"] + Keys.ENTER)
        console.wait_for("main table")
        body = console.driver.switch_to.active_element
        assert body.tag_name in ("h1", "body", "input", "main")
        fits = "return document.documentElement.scrollWidth <= window.innerWidth"
        assert console.driver.execute_script(fits)  # wide tables scroll inside their own box
        console.screenshot("batches-phone", PHONE)
        _tab_to(console, lambda el: el.get_dom_attribute("href") == "#/submit" and el.text == "Submit")
        ActionChains(console.driver).send_keys(Keys.ENTER).perform()  # on the link the Tab key reached
        console.wait_text("main h1", "Submit a batch")
        assert console.driver.execute_script(fits)
        console.screenshot("submit-phone", PHONE)
    finally:
        console.viewport(DESKTOP)


def _tab_to(console: Console, wanted: Any, presses: int = 60) -> Any:
    """Press Tab until the focused element is WANTED; the element. The key goes to the page, as a keyboard's does,
    not to an element: the batches page refreshes itself, and the element focused a moment ago may be gone or not
    yet shown (a loaded machine once found it "not interactable"). An element replaced between the press and the
    look is stale, and the next press goes on from wherever focus is then."""
    for _ in range(presses):
        ActionChains(console.driver).send_keys(Keys.TAB).perform()
        try:
            element = console.driver.switch_to.active_element
            if wanted(element):
                return element
        except StaleElementReferenceException:
            continue
    raise AssertionError("the element was not reachable with the Tab key")


def test_console_pages_carry_a_strict_content_security_policy_and_log_no_errors(
        console: Console, console_world: ConsoleWorld) -> None:
    for path in ("/console/", "/console/console.js", "/console/console.css"):
        res = requests.get(console_world.api.url + path, timeout=10)
        assert res.status_code == 200, path
        policy = res.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert res.headers["X-Content-Type-Options"] == "nosniff" and "set-cookie" not in res.headers
    assert requests.get(console_world.api.url + "/console", timeout=10, allow_redirects=False).status_code == 308
    missing = requests.get(console_world.api.url + "/console/..%2F..%2Fsettings.py", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    problems = [m for m in console.severe_logs() if "Refused" in m or "Uncaught" in m]  # CSP or script errors
    assert not problems, problems
