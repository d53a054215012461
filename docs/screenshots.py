"""Make the README's screenshots: TensorBoard with the traceinspect tab over the sample traces, and the
report of an annotated trace in it. Needs the `tensorboard` and `browser` extras and Chromium
(apt-get install -y chromium chromium-driver). Run from the repository root:

    python3 docs/screenshots.py            # writes docs/img/tensorboard-tab.png, docs/img/annotated.png
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"
SAMPLES = REPO / "sample_traces"


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ti-shots-"))
    logdir = tmp / "logdir"
    for run, name in (
        ("stall", "synthetic_dataloader_stall"),
        ("healthy", "synthetic_healthy"),
        ("launch", "synthetic_launch_bound"),
    ):
        (logdir / run).mkdir(parents=True)
        shutil.copy(SAMPLES / f"{name}.pt.trace.json.gz", logdir / run / "worker0.1700000000000.pt.trace.json.gz")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "traceinspect",
            "annotate",
            str(logdir / "launch" / "worker0.1700000000000.pt.trace.json.gz"),
            "-o",
            str(logdir / "launch" / "worker0.annotated.pt.trace.json.gz"),
        ],
        check=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tb = subprocess.Popen(
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**__import__("os").environ, "TRACEINSPECT_CACHE_DIR": str(tmp / "cache")},
    )
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=opts)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugins_listing", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        drv.set_window_size(1400, 860)
        drv.get(f"http://127.0.0.1:{port}/#traceinspect")
        wait = WebDriverWait(drv, 60)
        wait.until(EC.frame_to_be_available_and_switch_to_it((By.CSS_SELECTOR, "iframe[src*='name=traceinspect']")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]"))

        def show(run: str, name: str, scroll_to: str | None = None) -> None:
            row = next(
                r
                for r in drv.find_elements(By.CSS_SELECTOR, "#ti-list tr[data-id]")
                if r.find_element(By.CSS_SELECTOR, "td.name div").text == name
                and r.find_element(By.XPATH, "ancestor::table/preceding-sibling::h3[1]").text == run
            )
            row.click()
            wait.until(lambda d: d.find_element(By.ID, "ti-view").get_attribute("src"))
            wait.until(EC.frame_to_be_available_and_switch_to_it((By.ID, "ti-view")))
            wait.until(lambda d: name in "".join(h.text for h in d.find_elements(By.TAG_NAME, "h1")))
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            if scroll_to:
                time.sleep(0.5)
                drv.execute_script(
                    f"const e = document.querySelector({scroll_to!r}); "
                    "window.scrollTo(0, e.getBoundingClientRect().bottom + window.scrollY - window.innerHeight + 12)"
                )
            drv.switch_to.parent_frame()

        for run in ("healthy", "stall"):  # analyse these first so the list shows their numbers
            show(run, "worker0.1700000000000.pt.trace.json.gz")
        show("launch", "worker0.1700000000000.pt.trace.json.gz")
        show("stall", "worker0.1700000000000.pt.trace.json.gz")
        drv.switch_to.default_content()
        OUT.mkdir(parents=True, exist_ok=True)
        drv.save_screenshot(str(OUT / "tensorboard-tab.png"))
        drv.switch_to.frame(drv.find_element(By.CSS_SELECTOR, "iframe[src*='name=traceinspect']"))
        show("launch", "worker0.annotated.pt.trace.json.gz", "#finding-1 .annotate")
        drv.switch_to.default_content()
        drv.save_screenshot(str(OUT / "annotated.png"))
    finally:
        drv.quit()
        tb.terminate()
        tb.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {OUT / 'tensorboard-tab.png'} and {OUT / 'annotated.png'}")


if __name__ == "__main__":
    main()
