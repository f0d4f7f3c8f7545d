"""Driving Debian's headless Chromium through its chromedriver (Selenium, never a downloaded driver or browser),
and the console's pages as the tests use them: sign in, go to a page, wait for text, save a screenshot."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from devtools.processes import ROOT

ARTIFACTS = ROOT / "test-artifacts" / "console"
BROWSER_TZ = "Asia/Tokyo"  # not the machine's zone: the console must show times in the viewer's zone
DESKTOP = (1280, 800)
PHONE = (390, 844)


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) paths of Debian's `chromium` and `chromium-driver`, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def start_chromium(browser: str, driver: str, downloads: Path) -> webdriver.Chrome:
    """Headless Chromium at 1280x800 in BROWSER_TZ, saving downloads to DOWNLOADS."""
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={DESKTOP[0]},{DESKTOP[1]}", "--lang=en-US", "--no-first-run",
                "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver, env={**os.environ, "TZ": BROWSER_TZ},
                      log_output=str(ARTIFACTS / "chromedriver.log"))
    chrome = webdriver.Chrome(options=options, service=service)
    chrome.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": DESKTOP[0], "height": DESKTOP[1], "deviceScaleFactor": 1, "mobile": False})
    return chrome


@dataclass
class Console:
    """The console in one browser tab."""

    driver: webdriver.Chrome
    url: str
    downloads: Path

    def open(self, hash_path: str = "") -> None:
        """Load the console at #HASH_PATH (a fresh page load: the tab's sessionStorage is kept)."""
        self.driver.get(f"{self.url}/console/{'#' + hash_path if hash_path else ''}")
        self.wait(lambda: self.driver.execute_script("return document.querySelector('#main h1') !== null"),
                  "the console to render")

    def go(self, hash_path: str) -> None:
        """Navigate inside the console (no reload), as a click on a link would."""
        self.driver.execute_script("window.location.hash = arguments[0]", hash_path)
        self.wait(lambda: self.driver.execute_script("return location.hash") == hash_path, f"hash {hash_path}")

    def sign_in(self, secret: str) -> None:
        self.sign_out()
        field = self.wait_for("#secret")
        field.send_keys(secret)
        self.first("#sign-in button[type=submit]").click()
        self.wait(lambda: self.text("#who").startswith("Signed in"), "signed in")

    def sign_out(self) -> None:
        self.open()
        self.driver.execute_script("sessionStorage.clear(); location.hash = '#/';")
        self.open()

    def first(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str = "main") -> str:
        found = self.all(css)
        try:
            return found[0].text if found else ""
        except StaleElementReferenceException:
            return ""

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        """Wait for PREDICATE to be truthy (an event, not a time limit: TIMEOUT only bounds a broken run)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except (StaleElementReferenceException, WebDriverException):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                self.screenshot(f"timeout-{what.replace(' ', '-')[:40]}")
                raise AssertionError(f"timed out waiting for {what}; the page says:\n{self.text('body')[:2000]}")
            time.sleep(0.1)

    def wait_for(self, css: str, timeout: float = 60) -> WebElement:
        return self.wait(lambda: next((e for e in self.all(css) if e.is_displayed()), None), css, timeout)

    def wait_text(self, css: str, needle: str, timeout: float = 60) -> str:
        return self.wait(lambda: (t := self.text(css)) and needle in t and t, f"{needle!r} in {css}", timeout)

    def viewport(self, size: tuple[int, int]) -> None:
        """Make the page's viewport exactly SIZE CSS pixels (a phone-sized one also behaves as a phone's)."""
        width, height = size
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def screenshot(self, name: str, size: tuple[int, int] | None = None) -> Path:
        """Save the viewport as test-artifacts/console/NAME.png (at SIZE, when given)."""
        if size is not None:
            self.viewport(size)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def severe_logs(self) -> list[str]:
        """Errors the page logged (script errors, refused resources, Content-Security-Policy violations)."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def downloaded(self, name: str) -> Path:
        path = self.downloads / name
        self.wait(lambda: path.exists() and not (self.downloads / f"{name}.crdownload").exists(), f"download {name}")
        return path
