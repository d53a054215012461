"""The TensorBoard plugin in a real TensorBoard server and headless Chromium: the run list, its summaries
(step time, top finding, trace quality; a broken mark with the error) filled in by the background analysis
without opening a trace, a report with its verdict, a diff, and a broken trace's error shown in place.
Screenshots go to tests/artifacts/ (and tmp_path). Skips where tensorboard, selenium or a browser is
missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
from test_html_browser import ARTIFACTS, browser  # noqa: E402,F401  (the fixture)
from test_tb_plugin import CUT, HOSTILE_FILE, HOSTILE_RUN, TRUNCATED, make_logdir  # noqa: E402

from traceinspect.inert import text as inert_text  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90  # bounds on waiting, not speed assertions
WAIT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb")
    logdir = make_logdir(root / "logdir")
    port = _free_port()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        TRACEINSPECT_CACHE_DIR=str(root / "cache"),
    )
    log = open(root / "tensorboard.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "traceinspect.tb_plugin",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/data/plugins_listing", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"TensorBoard did not start: {(root / 'tensorboard.log').read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _shot(drv, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    drv.save_screenshot(str(ARTIFACTS / name))


@pytest.fixture()
def tab(browser, server):
    """The traceinspect tab inside TensorBoard's own UI, with the driver inside the plugin's frame."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(1400, 900)
    browser.get(f"{server}/#traceinspect")
    WebDriverWait(browser, WAIT_S).until(
        EC.frame_to_be_available_and_switch_to_it(
            (By.CSS_SELECTOR, "iframe[src*='plugin_entry.html?name=traceinspect']")
        )
    )
    WebDriverWait(browser, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]"))
    yield browser
    browser.switch_to.default_content()


def _row(drv, rel_end: str):
    from selenium.webdriver.common.by import By

    for r in drv.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]"):
        if r.find_element(By.CSS_SELECTOR, "td.name div").text == rel_end:
            return r
    raise AssertionError(f"{rel_end} not listed")


def _in_report(drv, check):
    """Wait for the report frame to load, run check inside it, come back."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, WAIT_S).until(lambda d: d.find_element(By.ID, "ti-view").get_attribute("src"))
    WebDriverWait(drv, WAIT_S).until(EC.frame_to_be_available_and_switch_to_it((By.ID, "ti-view")))
    try:
        WebDriverWait(drv, WAIT_S).until(lambda d: d.find_elements(By.ID, "verdict"))
        return check(drv)
    finally:
        drv.switch_to.parent_frame()


# first in this file: the server's first list request queues the background analysis, so the rows start
# queued and only the tab's polling of the list can fill them in
def test_the_list_shows_summaries_without_opening_a_trace(tab, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def summaries(d):
        rows = {
            r.find_element(By.CSS_SELECTOR, "td.name div").text: r
            for r in d.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")
        }
        states = [r.find_element(By.CSS_SELECTOR, "td.n").text for r in rows.values()]
        return rows if all(s.endswith(" ms") or s == "broken" for s in states) else None

    rows = WebDriverWait(tab, WAIT_S).until(summaries)
    assert not tab.find_element(By.ID, "ti-view").get_attribute("src")  # nothing was opened
    slow = rows["worker0.1700000000000.pt.trace.json.gz"].text
    assert " ms" in slow and "top: dataloader-stall — GPU idles" in slow and "Trace quality: good" in slow
    healthy = rows["worker0.pt.trace.json.gz"].text
    assert " ms" in healthy and "No significant slowdown" in healthy
    assert "Trace quality: limited" in rows[Path(CUT).name].text
    cut = rows[Path(TRUNCATED).name]
    mark = cut.find_element(By.CSS_SELECTOR, "td.n")
    assert mark.text == "broken" and "broken" in mark.get_attribute("class")
    err = cut.find_element(By.CSS_SELECTOR, ".top.err").text
    assert err.startswith(f"{TRUNCATED}: is truncated") and "\n" not in err
    # the markup file name is text (its invisible characters shown as escapes), and so is its summary
    hostile = rows[inert_text(HOSTILE_FILE)]
    assert "top: dataloader-stall" in hostile.text
    assert tab.execute_script("return document.querySelectorAll('img').length") == 0
    tab.switch_to.default_content()
    png = tmp_path / "tb-plugin-list.png"
    assert tab.save_screenshot(str(png))
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _shot(tab, "tb-plugin-list.png")


def test_run_list(tab):
    from selenium.webdriver.common.by import By

    runs = [h.text for h in tab.find_elements(By.CSS_SELECTOR, "#ti-list h3.run")]
    assert runs == sorted(["broken", "cut", "fast", "slow", HOSTILE_RUN])  # the markup run name is text
    assert tab.execute_script("return document.querySelectorAll('img').length") == 0
    assert len(tab.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")) == 7


def test_report_renders_with_its_verdict(tab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _row(tab, "worker0.1700000000000.pt.trace.json.gz").click()
    text = _in_report(tab, lambda d: d.find_element(By.ID, "verdict").text)
    assert "DataLoader" in text and "dataloader-stall" in text
    # the list now shows the trace's step time and top finding
    WebDriverWait(tab, WAIT_S).until(
        lambda d: "dataloader-stall" in _row(d, "worker0.1700000000000.pt.trace.json.gz").text
    )
    tab.switch_to.default_content()
    _shot(tab, "tb-plugin-report.png")


def test_diff_renders(tab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    opts = {o.text: o.get_attribute("value") for o in tab.find_elements(By.CSS_SELECTOR, "#ti-a option")}
    Select(tab.find_element(By.ID, "ti-a")).select_by_value(opts["slow/worker0.1700000000000.pt.trace.json.gz"])
    Select(tab.find_element(By.ID, "ti-b")).select_by_value(
        opts["fast/plugins/profile/2026_01_01/worker0.pt.trace.json.gz"]
    )
    tab.find_element(By.ID, "ti-compare").click()
    text = _in_report(tab, lambda d: d.find_element(By.ID, "verdict").text)
    assert "faster" in text
    tab.switch_to.default_content()
    _shot(tab, "tb-plugin-diff.png")


def test_broken_trace_shows_its_error_in_place(tab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _row(tab, "worker0.1.pt.trace.json").click()
    err = WebDriverWait(tab, WAIT_S).until(lambda d: d.find_elements(By.ID, "ti-error"))[0].text
    assert err.startswith("broken/worker0.1.pt.trace.json: ") and "\n" not in err
    assert "broken" in _row(tab, "worker0.1.pt.trace.json").text
    assert not tab.find_element(By.ID, "ti-view").get_attribute("src")  # no half-rendered report
    assert tab.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")  # the tab still works
    tab.switch_to.default_content()
    _shot(tab, "tb-plugin-error.png")
