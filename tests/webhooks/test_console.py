"""The console's webhook view in a real browser (Debian's headless Chromium) against a real `relay api` and `relay
worker`: the operator finds a batch's delivery, reads every attempt (time, status, latency, error), and sends it
again; a caller's sign-in does not reach it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from devtools.processes import RelayProcess
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.console.browser import ARTIFACTS, Console, start_chromium
from tests.console.conftest import chromium  # noqa: F401  (the browser fixture)
from tests.webhooks.helpers import deliveries, for_batch, submit, wait_delivery

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str], hooks_api: RelayProcess,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    downloads = tmp_path_factory.mktemp("webhook-downloads")
    driver = start_chromium(*chromium, downloads)
    try:
        yield Console(driver=driver, url=hooks_api.url, downloads=downloads)
    finally:
        driver.quit()
        shutil.rmtree(downloads, ignore_errors=True)


def test_the_operator_reads_a_deliverys_attempts_and_sends_it_again(
        browser: Console, stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    receiver.behave("/project", status=500, times=2)
    key = stack.new_key("hooks")
    batch_id = submit(stack, key, 1)
    wait_delivery(stack, batch_id, "delivered")
    browser.sign_in(stack.settings.admin_token)
    browser.first("#nav a[href='#/webhooks']").click()
    browser.wait_for("#webhook-filters")
    browser.first("#w-batch").send_keys(batch_id)
    browser.first("#webhook-filters button[type=submit]").click()
    [delivery] = deliveries(stack, batch_id)
    row = browser.wait_for(f"tr[data-delivery='{delivery['id']}']")
    assert "delivered" in row.text and "batch.finished" in row.text and "project:p-hooks" in row.text
    row.find_element(By.CSS_SELECTOR, "a").click()
    browser.wait_for("tr[data-attempt='3']")
    statuses = [r.find_elements(By.CSS_SELECTOR, "td")[2].text for r in browser.all("tr[data-attempt]")]
    assert statuses == ["500", "500", "200"]
    assert "HTTP 500" in browser.text("tr[data-attempt='1']") and " ms" in browser.text("tr[data-attempt='3']")
    assert batch_id in browser.text("#event-body")
    browser.screenshot("webhook-delivery")

    browser.first("#send-again").click()
    browser.wait_for("#confirm [value=yes]").click()
    for_batch(receiver, "/project", batch_id, count=4)
    browser.wait_for("tr[data-attempt='4']")
    browser.wait_text("#delivery-state", "delivered")
    problems = [m for m in browser.severe_logs() if "Refused" in m or "Uncaught" in m]  # CSP or script errors
    assert not problems, problems

    browser.sign_in(key)  # a caller: the page is not theirs
    browser.go("#/webhooks")
    browser.wait_text("main", "This page is not part of the console for your sign-in")


def test_the_submitter_reads_its_batchs_deliveries_on_the_batch_page(
        browser: Console, stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    receiver.behave("/project", status=503, times=1)
    key = stack.new_key("hooks")
    batch_id = submit(stack, key, 1)
    wait_delivery(stack, batch_id, "delivered")
    [delivery] = deliveries(stack, batch_id)
    browser.sign_in(key)
    browser.go(f"#/batches/{batch_id}")
    browser.wait_for("#batch-webhooks summary").click()
    shown = browser.wait_for(f"section[data-delivery='{delivery['id']}']")
    assert "project:p-hooks" in shown.text and "delivered" in shown.text and "batch.finished" in shown.text
    assert "/project" not in shown.text  # a project's endpoint by its origin only
    statuses = [r.find_elements(By.CSS_SELECTOR, "td")[2].text for r in shown.find_elements(By.CSS_SELECTOR,
                                                                                           "tr[data-attempt]")]
    assert statuses == ["503", "200"]
    browser.screenshot("batch-webhook-deliveries")
    problems = [m for m in browser.severe_logs() if "Refused" in m or "Uncaught" in m]
    assert not problems, problems
