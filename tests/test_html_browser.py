"""The study and run pages in a real browser (headless Chromium through Selenium): no console
errors, every section drawn with a size, the results table sorted by a header click in the
order of results.csv's figures, and screenshots saved (to STUDY_PAGE_SCREENSHOTS, a
directory, where it is set; else the test's tmp directory)."""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest

from tests import browser, study_fixture
from tests.test_html_pages import PNG

# .ci/run sets it: there a missing browser fails the test instead of skipping it.
REQUIRE = "TRANSFORMER_REQUIRE_BROWSER"
MISSING = browser.missing()
pytestmark = [
    pytest.mark.skipif(MISSING is not None and not os.environ.get(REQUIRE), reason=str(MISSING)),
    pytest.mark.xdist_group("html_browser"),  # one worker: one study, one browser
]

STUDY_SECTIONS = (
    "results",
    "forest",
    "lr-search",
    "valid-loss",
    "train-loss",
    "length",
    "samples",
    "provenance",
)
RUN_SECTIONS = ("curves", "eval", "length", "samples", "attention", "provenance")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    _, workdir = study_fixture.build(tmp_path_factory.mktemp("html_browser"))
    return workdir


@pytest.fixture(scope="module")
def driver():
    if MISSING is not None:
        pytest.fail(f"{REQUIRE} is set but {MISSING}")
    with browser.chrome() as session:
        yield session


def _shots(tmp_path) -> str:
    where = os.environ.get("STUDY_PAGE_SCREENSHOTS") or str(tmp_path)
    os.makedirs(where, exist_ok=True)
    return where


def _severe(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _sized(element) -> bool:
    return element.size["width"] > 0 and element.size["height"] > 0


def _variant_order(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#results-table tbody tr")
    return [row.find_elements(By.TAG_NAME, "td")[0].text.removesuffix(" (A/A)") for row in rows]


def _click_header(driver, title: str) -> None:
    from selenium.webdriver.common.by import By

    headers = driver.find_elements(By.CSS_SELECTOR, "#results-table thead th")
    next(h for h in headers if h.text.replace("\n", " ") == title).click()


def test_the_study_page_renders_every_section_sorts_and_logs_no_error(driver, study, tmp_path):
    from selenium.webdriver.common.by import By

    browser.open_page(driver, os.path.join(study, "results.html"))
    assert _severe(driver) == []
    for section_id in STUDY_SECTIONS:
        section = driver.find_element(By.ID, section_id)
        content = section.find_elements(By.CSS_SELECTOR, "svg, table, pre")
        assert _sized(section) and content and all(_sized(c) for c in content), section_id
    arms = ["base", "base_aa", "post", "swiglu"]
    for section_id in ("lr-search", "valid-loss", "train-loss", "length"):
        charts = driver.find_elements(By.CSS_SELECTOR, f"#{section_id} svg")
        assert [c.find_element(By.TAG_NAME, "title").get_attribute("textContent") for c in charts]
        assert len(charts) == len(arms), section_id
    points = driver.find_elements(By.CSS_SELECTOR, "#forest-bleu circle[data-variant]")
    assert [p.get_attribute("data-variant") for p in points] == ["base_aa", "post", "swiglu"]

    # Sorting: the order of results.csv's figures, read here with the csv module.
    with open(os.path.join(study, "results.csv"), newline="") as f:
        bleu = {r["variant"]: float(r["bleu_mean"]) for r in csv.DictReader(f)}
    assert _variant_order(driver) == arms  # the table's own order first
    _click_header(driver, "BLEU (mean ± 95% t)")
    assert _variant_order(driver) == sorted(bleu, key=bleu.get)
    _click_header(driver, "BLEU (mean ± 95% t)")
    assert _variant_order(driver) == sorted(bleu, key=bleu.get, reverse=True)
    _click_header(driver, "variant")
    assert _variant_order(driver) == sorted(arms)
    assert _severe(driver) == []

    shots = _shots(tmp_path)
    browser.full_page_screenshot(driver, os.path.join(shots, "study_page.png"))
    driver.find_element(By.ID, "forest-bleu").screenshot(os.path.join(shots, "forest_bleu.png"))
    for name in ("study_page.png", "forest_bleu.png"):
        with open(os.path.join(shots, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_run_page_renders_every_section_without_errors(driver, study, tmp_path):
    from selenium.webdriver.common.by import By

    from transformer.research.html import run_page

    run = tmp_path / "run"
    shutil.copytree(os.path.join(study, "post", "0"), run)
    analysis = run / "analysis"  # transformer-analyze's output, its PNGs a 1x1 picture here
    (analysis / "sentence0").mkdir(parents=True)
    (analysis / "sentence0" / "overview.png").write_bytes(PNG)
    report = {"step": 6, "statistics": {}, "sentences": [{"source": "a", "translation": "b"}]}
    (analysis / "report.json").write_text(json.dumps(report))
    page = run_page.write(str(run), str(tmp_path / "run.html"), "transformer-report --html RUN")
    browser.open_page(driver, page)
    assert _severe(driver) == []
    for section_id in RUN_SECTIONS:
        section = driver.find_element(By.ID, section_id)
        assert _sized(section), section_id
    assert len(driver.find_elements(By.CSS_SELECTOR, "#curves svg")) == 3  # no valid BLEU logged
    (image,) = driver.find_elements(By.CSS_SELECTOR, "#attention img")
    assert driver.execute_script("return arguments[0].naturalWidth", image) == 1  # it decoded
    browser.full_page_screenshot(driver, os.path.join(_shots(tmp_path), "run_page.png"))
