"""Headless Chromium driven by Selenium, for the HTML page tests, and a command that saves a
screenshot of a page or of one element of it (the README's picture of a forest plot):

    python -m tests.browser studies/X/results.html --element forest-bleu --out forest.png

It uses Debian's `chromium` and `chromium-driver` packages (apt-get install chromium
chromium-driver; .ci/run installs them) and the `selenium` of the dev extra; `missing()`
says which of them is absent, so that a test can skip in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
WINDOW = (1400, 1000)


def _browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def missing() -> str | None:
    """Why the browser cannot run here (None: it can)."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    if _browser() is None or shutil.which(DRIVER) is None:
        return (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
    return None


@contextlib.contextmanager
def chrome():
    """A headless Chromium session that keeps the console's log (browser entries)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = _browser()
    # --no-sandbox: CI and containers run as root, where Chromium's sandbox refuses to start.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Both paths given, so Selenium looks nothing up on the network.
    driver = webdriver.Chrome(service=Service(shutil.which(DRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver, path: str) -> None:
    driver.get("file://" + os.path.abspath(path))


def full_page_screenshot(driver, out: str) -> None:
    """The whole page, not only the window: the window is resized to the document first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WINDOW[0], min(int(height) + 120, 16000))
    driver.save_screenshot(out)
    driver.set_window_size(*WINDOW)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshot an HTML page or one element of it.")
    parser.add_argument("page", help="the HTML file")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--element", help="an element id (e.g. forest-bleu); default the page")
    args = parser.parse_args(argv)
    reason = missing()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    with chrome() as driver:
        open_page(driver, args.page)
        if args.element:
            from selenium.webdriver.common.by import By

            driver.find_element(By.ID, args.element).screenshot(args.out)
        else:
            full_page_screenshot(driver, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
