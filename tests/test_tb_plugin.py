"""The TensorBoard plugin's backend, through its WSGI routes (no server): the listing of a logdir in the
layouts tensorboard_trace_handler writes, lazy analysis, the report and diff pages, a broken trace's one-line
error, and that only listed traces can be opened. The browser test is tests/browser/test_tb_plugin_browser.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
from tensorboard.plugins import base_plugin  # noqa: E402
from werkzeug.test import Client  # noqa: E402

from builders import build_dataloader_stall, build_healthy  # noqa: E402
from test_html import XSS_KERNEL  # noqa: E402
from traceinspect.tb_plugin import TraceinspectPlugin  # noqa: E402
from traceinspect.tb_plugin.plugin import scan_logdir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HOSTILE_RUN = "<img src=x onerror=alert(1)>"


def make_logdir(root: Path) -> Path:
    """Two runs as tensorboard_trace_handler writes them, the old profiler plugin's layout, a broken trace,
    a run whose name is markup, and files that are not traces."""
    for d in ("slow", "fast/plugins/profile/2026_01_01", HOSTILE_RUN):
        (root / d).mkdir(parents=True)
    build_dataloader_stall().write(root / "slow" / "worker0.1700000000000.pt.trace.json.gz")
    build_healthy().write(root / "fast" / "plugins" / "profile" / "2026_01_01" / "worker0.pt.trace.json.gz")
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "worker0.1.pt.trace.json").write_text('{"traceEvents": 5}')
    build_healthy().write(root / HOSTILE_RUN / "w.pt.trace.json")
    (root / "slow" / "events.out.tfevents.1").write_bytes(b"")
    (root / "slow" / "notes.json").write_text("{}")
    return root


@pytest.fixture()
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    logdir = make_logdir(tmp_path / "logdir")
    plugin = TraceinspectPlugin(base_plugin.TBContext(logdir=str(logdir)))
    apps = plugin.get_plugin_apps()

    def get(route, **args):
        r = Client(apps[route]).get(route, query_string=args)
        return r.status_code, r.get_data(as_text=True), r.headers

    return plugin, get


def _ids(get) -> dict[str, str]:
    _, body, _ = get("/traces")
    return {t["rel"]: t["id"] for r in json.loads(body)["runs"] for t in r["traces"]}


def _wait(get, tid, timeout_s=60.0) -> dict:
    deadline = time.monotonic() + timeout_s  # a bound on a hung worker, not a speed assertion
    while True:
        code, body, _ = get("/analyze", trace=tid)
        st = json.loads(body)
        if st["state"] in ("done", "error") or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_lists_every_trace_by_run_and_nothing_else(client):
    plugin, get = client
    ids = _ids(get)
    assert set(ids) == {
        "slow/worker0.1700000000000.pt.trace.json.gz",
        "fast/plugins/profile/2026_01_01/worker0.pt.trace.json.gz",
        "broken/worker0.1.pt.trace.json",
        f"{HOSTILE_RUN}/w.pt.trace.json",
    }
    _, body, _ = get("/traces")
    runs = {r["run"] for r in json.loads(body)["runs"]}
    assert runs == {"slow", "fast", "broken", HOSTILE_RUN}  # a JSON string: the frontend sets it as text
    assert plugin.is_active()


def test_reports_are_computed_on_first_view_then_listed_with_step_time_and_top_finding(client):
    _, get = client
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    _, body, _ = get("/traces")
    row = next(t for r in json.loads(body)["runs"] for t in r["traces"] if t["id"] == tid)
    assert row["state"] == "new"  # nothing analysed before anyone looks
    st = _wait(get, tid)
    assert st["state"] == "done" and st["top"] == "dataloader-stall"
    # build_dataloader_stall: each step is the 30 ms DataLoader wait plus the GPU work: over 30 ms
    assert st["median_step_us"] > 30_000
    code, page, headers = get("/report", trace=tid)
    assert code == 200 and page.startswith("<!DOCTYPE html>") and "text/html" in headers["Content-Type"]
    assert 'id="verdict"' in page and "dataloader-stall" in page
    assert "Content-Security-Policy" in page  # the report keeps its own CSP inside TensorBoard


def test_diff_of_two_traces(client):
    _, get = client
    ids = _ids(get)
    a, b = (
        ids["slow/worker0.1700000000000.pt.trace.json.gz"],
        ids["fast/plugins/profile/2026_01_01/worker0.pt.trace.json.gz"],
    )
    code, body, _ = get("/diff", a=a, b=b)
    assert code == 409 and {"a", "b"} <= set(json.loads(body))  # not analysed yet: says so, starts both
    assert _wait(get, a)["state"] == _wait(get, b)["state"] == "done"
    code, page, _ = get("/diff", a=a, b=b)
    assert code == 200 and "traceinspect diff" in page and "faster" in page


def test_a_broken_trace_reports_its_one_line_error(client):
    _, get = client
    st = _wait(get, _ids(get)["broken/worker0.1.pt.trace.json"])
    assert st["state"] == "error"
    assert "\n" not in st["error"] and st["error"].startswith("broken/worker0.1.pt.trace.json: ")
    assert "Traceback" not in st["error"] and str(Path("/")) + "tmp" not in st["error"]  # no server paths
    code, body, _ = get("/report", trace=_ids(get)["broken/worker0.1.pt.trace.json"])
    assert code == 409 and json.loads(body)["state"] == "error"


@pytest.mark.parametrize(
    "bad", ["../../etc/passwd", "/etc/passwd", "", "0" * 16, "slow/worker0.1700000000000.pt.trace.json.gz"]
)
def test_only_listed_traces_can_be_opened(client, bad):
    _, get = client
    for route, args in (("/analyze", {"trace": bad}), ("/report", {"trace": bad}), ("/diff", {"a": bad, "b": bad})):
        code, body, _ = get(route, **args)
        assert code == 404 and "only listed traces" in json.loads(body)["error"]


def test_links_out_of_the_logdir_are_not_listed(tmp_path):
    outside = build_healthy().write(tmp_path / "secret.pt.trace.json")
    logdir = tmp_path / "logdir" / "run"
    logdir.mkdir(parents=True)
    (logdir / "leak.pt.trace.json").symlink_to(outside)
    (logdir / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    assert scan_logdir(tmp_path / "logdir") == []


def test_hostile_names_stay_text_in_the_report(client, tmp_path):
    from test_html import crafted

    crafted().write(tmp_path / "logdir" / "slow" / "x.pt.trace.json")
    plugin = TraceinspectPlugin(base_plugin.TBContext(logdir=str(tmp_path / "logdir")))
    apps = plugin.get_plugin_apps()

    def get2(route, **args):
        r = Client(apps[route]).get(route, query_string=args)
        return r.status_code, r.get_data(as_text=True), r.headers

    tid = _ids(get2)["slow/x.pt.trace.json"]
    assert _wait(get2, tid)["state"] == "done"
    _, page, _ = get2("/report", trace=tid)
    assert XSS_KERNEL not in page and "<script>" not in page.lower().replace('<script type="application/json"', "")


def test_registered_through_the_tensorboard_plugins_entry_point():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml with tomllib")
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["tensorboard_plugins"]
    assert eps == {"traceinspect": "traceinspect.tb_plugin:TraceinspectPlugin"}
    assert any("static/*" in p for p in meta["tool"]["setuptools"]["package-data"]["traceinspect.tb_plugin"])
    assert TraceinspectPlugin.plugin_name == "traceinspect"
    assert TraceinspectPlugin(base_plugin.TBContext(logdir=None)).frontend_metadata().es_module_path == "/index.js"


def test_a_trace_being_read_reports_its_progress(client, monkeypatch):
    # the reader reports 40% and then waits: the tab is told "reading, 0.4" rather than hanging
    import threading

    import traceinspect.trace.model as model

    plugin, get = client
    reached, release = threading.Event(), threading.Event()
    real = model.load_trace

    def slow(path, progress=None, **kw):
        progress(0.4)
        reached.set()
        release.wait(30)
        return real(path, **kw)

    monkeypatch.setattr(model, "load_trace", slow)
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    get("/analyze", trace=tid)
    assert reached.wait(30)
    try:
        st = json.loads(get("/analyze", trace=tid)[1])
        assert (st["state"], st["phase"], st["progress"]) == ("running", "reading", 0.4)
        code, body, _ = get("/report", trace=tid)
        assert code == 409 and json.loads(body)["state"] == "running"  # no half report
    finally:
        release.set()
    assert _wait(get, tid)["state"] == "done"


def test_the_report_keeps_a_content_security_policy_that_forbids_scripts(client):
    _, get = client
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    _wait(get, tid)
    code, page, headers = get("/report", trace=tid)
    assert code == 200
    assert "default-src 'none'" in page  # the report's own policy, inside the page
    assert "script-src" in headers.get("Content-Security-Policy", "")  # and TensorBoard's header


def test_a_restarted_server_serves_the_cached_report(client):
    # the second plugin (a TensorBoard restart) finds the report in traceinspect's cache: a hit was the
    # internal error 'a report is a JSON object, not Report'
    plugin, get = client
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    assert _wait(get, tid)["state"] == "done"
    again = TraceinspectPlugin(base_plugin.TBContext(logdir=str(plugin._logdir)))
    apps = again.get_plugin_apps()
    st = json.loads(Client(apps["/analyze"]).get("/analyze", query_string={"trace": tid}).get_data(as_text=True))
    deadline = time.monotonic() + 60  # a bound on a hung worker, not a speed assertion
    while st["state"] not in ("done", "error", "broken") and time.monotonic() < deadline:
        time.sleep(0.05)
        st = json.loads(Client(apps["/analyze"]).get("/analyze", query_string={"trace": tid}).get_data(as_text=True))
    assert (st["state"], st["error"], st["top"]) == ("done", "", "dataloader-stall")
