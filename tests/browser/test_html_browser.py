"""The HTML report in a real browser (headless Chromium via Selenium): no console errors, charts present,
markup from the trace shown as text. Screenshots go to tests/artifacts/. Skips where no browser is installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builders import build_dataloader_stall, build_healthy
from test_html import XSS_KERNEL, crafted, report_of
from traceinspect.diff import diff
from traceinspect.render import charts
from traceinspect.render.html import render, render_diff

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    if not CHROMIUM or not DRIVER:
        pytest.skip("no headless Chromium: apt-get install -y chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,2400"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        drv = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    except Exception as e:  # a broken browser install must not fail the suite
        pytest.skip(f"headless Chromium did not start: {type(e).__name__}: {str(e).splitlines()[0]}")
    yield drv
    drv.quit()


def screenshot(drv, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = drv.execute_script("return document.body.scrollHeight")
    drv.set_window_size(1280, min(max(int(height) + 40, 800), 8000))
    drv.save_screenshot(str(ARTIFACTS / name))


def load_report(drv, tmp_path, builder, name):
    page = tmp_path / f"{name}.html"
    page.write_text(render(report_of(builder, tmp_path, f"{name}.pt.trace.json")), encoding="utf-8")
    drv.get(page.as_uri())
    errors = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    return errors


def test_report_opens_without_errors_and_shows_charts(browser, tmp_path):
    from selenium.webdriver.common.by import By

    errors = load_report(browser, tmp_path, build_dataloader_stall(), "stall")
    assert errors == []
    assert "dataloader-stall" in browser.find_element(By.ID, "verdict").text
    svgs = browser.find_elements(By.CSS_SELECTOR, ".chart svg")
    if charts.available():
        assert len(svgs) >= 2 and all(s.size["width"] > 100 for s in svgs)
    screenshot(browser, "report-stall.png")


def test_markup_in_names_is_text_in_the_browser(browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    errors = load_report(browser, tmp_path, crafted(), "xss")
    assert errors == []  # an injected script would also show as a CSP violation here
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert
    # no executable script and no injected image in the DOM; the name is shown as text
    assert (
        browser.execute_script("return document.querySelectorAll('script:not([type=\"application/json\"])').length")
        == 0
    )
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    assert XSS_KERNEL in browser.find_element(By.ID, "kernels").text
    screenshot(browser, "report-xss.png")


def test_diff_page_opens_without_errors(browser, tmp_path):
    from selenium.webdriver.common.by import By

    d = diff(
        report_of(build_dataloader_stall(), tmp_path, "b.pt.trace.json"),
        report_of(build_healthy(), tmp_path, "a.pt.trace.json"),
    )
    page = tmp_path / "diff.html"
    page.write_text(render_diff(d), encoding="utf-8")
    browser.get(page.as_uri())
    assert [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"] == []
    assert "faster" in browser.find_element(By.ID, "verdict").text
    screenshot(browser, "diff.png")


CUDNN = (
    "void cudnn::engines_precompiled::implicit_convolve_sgemm_nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
    "(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)sm80_xmma_fprop_implicit_gemm_"
    "f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize128x128x8_stage3_warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel"
)


@pytest.mark.parametrize("width", [1400, 900])
def test_long_kernel_names_stay_inside_their_card(browser, tmp_path, width):
    """A long cuDNN name as an evidence value (fp32-gemm's 'top fp32 kernel') is cut with an ellipsis inside
    its finding card, with the full text on hover; the page never scrolls sideways."""
    from selenium.webdriver.common.by import By
    from builders_compute import _gemm_steps

    t = _gemm_steps("A100", CUDNN)  # fp32 (Input type float) GEMM/conv under a cuDNN kernel name
    browser.set_window_size(width, 1200)
    assert load_report(browser, tmp_path, t, f"cudnn{width}") == []
    cards = browser.find_elements(By.CSS_SELECTOR, "article.finding")
    assert cards
    overflow = browser.execute_script("""
        return [...document.querySelectorAll('article.finding table')].map(
            t => t.getBoundingClientRect().right - t.closest('article').getBoundingClientRect().right);""")
    assert max(overflow) <= 0.5
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    titles = [td.get_attribute("title") for td in browser.find_elements(By.CSS_SELECTOR, "table.ev td.v")]
    assert any(CUDNN[:100] in (x or "") for x in titles)
    browser.save_screenshot(str(ARTIFACTS / f"report-cudnn-{width}.png"))
