"""The TensorBoard plugin in a real TensorBoard server and headless Chromium: the run list, a report with
its verdict, a diff, and a broken trace's error shown in place. Screenshots go to tests/artifacts/. Skips
where tensorboard, selenium or a browser is missing."""

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
from test_tb_plugin import HOSTILE_RUN, make_logdir  # noqa: E402

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


def test_run_list(tab):
    from selenium.webdriver.common.by import By

    runs = [h.text for h in tab.find_elements(By.CSS_SELECTOR, "#ti-list h3.run")]
    assert runs == sorted(["broken", "fast", "slow", HOSTILE_RUN])  # the markup run name is text
    assert tab.execute_script("return document.querySelectorAll('img').length") == 0
    assert len(tab.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")) == 4


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
    assert "failed" in _row(tab, "worker0.1.pt.trace.json").text
    assert not tab.find_element(By.ID, "ti-view").get_attribute("src")  # no half-rendered report
    assert tab.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")  # the tab still works
    tab.switch_to.default_content()
    _shot(tab, "tb-plugin-error.png")
