"""The TensorBoard plugin's backend, through its WSGI routes (no server): the listing of a logdir in the
layouts tensorboard_trace_handler writes, the background analysis a list request queues (bounded, an opened
trace first, each trace once, from the cache after a restart) and the summaries it lists, analysis on view,
the report and diff pages, a broken trace's one-line error, and that only listed traces can be opened. The
browser test is tests/browser/test_tb_plugin_browser.py."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
from tensorboard.plugins import base_plugin  # noqa: E402
from werkzeug.test import Client  # noqa: E402

from builders import build_dataloader_stall, build_healthy  # noqa: E402
from test_html import XSS_KERNEL  # noqa: E402
from traceinspect.inert import text as inert_text  # noqa: E402
from traceinspect.tb_plugin import TraceinspectPlugin  # noqa: E402
from traceinspect.tb_plugin import plugin as plugin_mod  # noqa: E402
from traceinspect.tb_plugin.plugin import scan_logdir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HOSTILE_RUN = "<img src=x onerror=alert(1)>"
# a file name that is markup, with a bidi override (it reads backwards) and an escape character
HOSTILE_FILE = "<img src=y onerror=alert(2)>\u202e\x1b[31m.pt.trace.json"
TRUNCATED = "broken/worker1.2.pt.trace.json"  # cut before its first complete step: cannot be analysed
CUT = "cut/worker0.3.pt.trace.json"  # cut in its last step: the complete ones analysed, quality limited
WAIT_S = 60  # a bound on a hung worker, not a speed assertion


def _cut(path: Path, frac: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * frac)])
    return path


def make_logdir(root: Path) -> Path:
    """Two runs as tensorboard_trace_handler writes them, the old profiler plugin's layout, two broken
    traces (not a trace; truncated), one cut short that can still be analysed, a run and a file whose
    names are markup, and files that are not traces."""
    for d in ("slow", "fast/plugins/profile/2026_01_01", HOSTILE_RUN, "broken", "cut"):
        (root / d).mkdir(parents=True)
    build_dataloader_stall().write(root / "slow" / "worker0.1700000000000.pt.trace.json.gz")
    build_healthy().write(root / "fast" / "plugins" / "profile" / "2026_01_01" / "worker0.pt.trace.json.gz")
    (root / "broken" / "worker0.1.pt.trace.json").write_text('{"traceEvents": 5}')
    _cut(build_healthy().write(root / TRUNCATED), 0.1)
    _cut(build_healthy().write(root / CUT), 0.5)
    build_healthy().write(root / HOSTILE_RUN / "w.pt.trace.json")
    build_dataloader_stall().write(root / HOSTILE_RUN / HOSTILE_FILE)
    (root / "slow" / "events.out.tfevents.1").write_bytes(b"")
    (root / "slow" / "notes.json").write_text("{}")
    return root


def _client(logdir: Path):
    plugin = TraceinspectPlugin(base_plugin.TBContext(logdir=str(logdir)))
    apps = plugin.get_plugin_apps()

    def get(route, **args):
        r = Client(apps[route]).get(route, query_string=args)
        return r.status_code, r.get_data(as_text=True), r.headers

    return plugin, get


@pytest.fixture()
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    plugin, get = _client(make_logdir(tmp_path / "logdir"))
    yield plugin, get
    plugin.close()  # no analysis left running into the next test (or outside its cache directory)


def _rows(get) -> dict[str, dict]:
    _, body, _ = get("/traces")
    return {t["rel"]: t for r in json.loads(body)["runs"] for t in r["traces"]}


class _Loads:
    """load_trace, recording the path of every call; `hold` makes the first call wait for `release`."""

    def __init__(self, monkeypatch, hold: bool = False):
        import traceinspect.trace.model as model

        self.paths: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        real = model.load_trace

        def load(path, progress=None, **kw):
            self.paths.append(str(path))
            self.started.set()
            assert self.release.wait(WAIT_S)
            return real(path, progress=progress, **kw)

        monkeypatch.setattr(model, "load_trace", load)


def _ids(get) -> dict[str, str]:
    _, body, _ = get("/traces")
    return {t["rel"]: t["id"] for r in json.loads(body)["runs"] for t in r["traces"]}


def _wait(get, tid, timeout_s=60.0) -> dict:
    deadline = time.monotonic() + timeout_s  # a bound on a hung worker, not a speed assertion
    while True:
        code, body, _ = get("/analyze", trace=tid)
        st = json.loads(body)
        if st["state"] in ("done", "broken") or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_lists_every_trace_by_run_and_nothing_else(client):
    plugin, get = client
    ids = _ids(get)
    assert set(ids) == {
        "slow/worker0.1700000000000.pt.trace.json.gz",
        "fast/plugins/profile/2026_01_01/worker0.pt.trace.json.gz",
        "broken/worker0.1.pt.trace.json",
        TRUNCATED,
        CUT,
        f"{HOSTILE_RUN}/w.pt.trace.json",
        inert_text(f"{HOSTILE_RUN}/{HOSTILE_FILE}"),
    }
    _, body, _ = get("/traces")
    runs = {r["run"] for r in json.loads(body)["runs"]}
    assert runs == {"slow", "fast", "broken", "cut", HOSTILE_RUN}  # a JSON string: the frontend sets it as text
    assert plugin.is_active()


def test_a_trace_beyond_the_background_bound_is_computed_on_first_view(client, monkeypatch):
    monkeypatch.setattr(plugin_mod, "BACKGROUND_MAX_TRACES", 0)
    _, get = client
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    _, body, _ = get("/traces")
    row = next(t for r in json.loads(body)["runs"] for t in r["traces"] if t["id"] == tid)
    assert row["state"] == "new"  # not queued in the background: analysed when someone looks
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
    assert st["state"] == "broken"
    assert "\n" not in st["error"] and st["error"].startswith("broken/worker0.1.pt.trace.json: ")
    assert "Traceback" not in st["error"] and str(Path("/")) + "tmp" not in st["error"]  # no server paths
    code, body, _ = get("/report", trace=_ids(get)["broken/worker0.1.pt.trace.json"])
    assert code == 409 and json.loads(body)["state"] == "broken"


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
    plugin, get2 = _client(tmp_path / "logdir")
    try:
        tid = _ids(get2)["slow/x.pt.trace.json"]
        assert _wait(get2, tid)["state"] == "done"
        _, page, _ = get2("/report", trace=tid)
        assert XSS_KERNEL not in page and "<script>" not in page.lower().replace('<script type="application/json"', "")
    finally:
        plugin.close()


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
    import traceinspect.trace.model as model

    plugin, get = client
    reached, release = threading.Event(), threading.Event()
    real = model.load_trace

    def slow(path, progress=None, **kw):
        if not str(path).endswith("worker0.1700000000000.pt.trace.json.gz"):  # the background's others
            return real(path, **kw)
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


# --- the background analysis a list request queues -------------------------------------------------------


def test_the_list_shows_step_time_top_finding_and_quality_without_opening_a_trace(client):
    plugin, get = client
    before = _rows(get)  # the first list request queues every trace; nothing is opened
    assert {r["state"] for r in before.values()} <= {"queued", "running", "done", "broken"}
    assert plugin.wait_idle(WAIT_S)
    rows = _rows(get)
    slow = rows["slow/worker0.1700000000000.pt.trace.json.gz"]
    assert slow["state"] == "done" and slow["top"] == "dataloader-stall"
    assert slow["median_step_us"] > 30_000  # each step is the 30 ms DataLoader wait plus the GPU work
    assert slow["top_title"].startswith("GPU idles") and "DataLoader" in slow["top_title"]
    assert (slow["quality"], slow["quality_line"]) == ("good", "Trace quality: good")
    healthy = rows["fast/plugins/profile/2026_01_01/worker0.pt.trace.json.gz"]
    assert healthy["state"] == "done" and healthy["top"] == "" and healthy["headline"].startswith("No significant")
    cut = rows[CUT]  # recovered: its complete steps analysed, and the report says not to trust it fully
    assert cut["state"] == "done" and cut["quality"] == "limited" and cut["quality_line"].startswith("Trace quality")
    for rel, row in rows.items():  # one source: every number and phrase is the report's own
        if row["state"] != "done":
            continue
        rep = plugin._jobs[row["id"]]["report"]
        assert row["median_step_us"] == rep.steps.median_us, rel
        assert row["quality_line"] == inert_text(rep.trace_quality.line), rel
        assert row["top_title"] == inert_text(rep.verdict.top_title if rep.verdict.top else ""), rel


def test_a_truncated_trace_is_marked_broken_in_the_list_without_being_opened(client):
    plugin, get = client
    get("/traces")
    assert plugin.wait_idle(WAIT_S)
    row = _rows(get)[TRUNCATED]
    assert row["state"] == "broken"
    assert row["error"].startswith(f"{TRUNCATED}: is truncated") and "\n" not in row["error"]
    assert "Traceback" not in row["error"] and str(plugin._logdir) not in row["error"]  # no server paths
    assert "median_step_us" not in row and "top" not in row  # no numbers for a trace that was not analysed
    assert _rows(get)["broken/worker0.1.pt.trace.json"]["state"] == "broken"


def _timed_logdir(root: Path, n: int) -> list[Path]:
    """n small traces in one run, the i-th of 3 + i steps (no two alike: no cache hit between them) and
    modified i minutes after the first (the last is the newest and the biggest)."""
    (root / "run").mkdir(parents=True)
    paths = []
    for i in range(n):
        p = build_healthy(steps=3 + i).write(root / "run" / f"w{i}.pt.trace.json")
        os.utime(p, ns=(1_700_000_000_000_000_000 + i * 60_000_000_000,) * 2)
        paths.append(p)
    return paths


def test_the_background_queue_is_bounded_to_the_newest_traces(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(plugin_mod, "BACKGROUND_MAX_TRACES", 2)
    monkeypatch.setattr(plugin_mod, "LIST_TTL_S", 0.0)  # every list request walks the logdir
    paths = _timed_logdir(tmp_path / "logdir", 5)
    # the newest file is over the size bound: skipped, so the two after it are the ones queued
    monkeypatch.setattr(plugin_mod, "BACKGROUND_MAX_BYTES", paths[3].stat().st_size)
    assert paths[4].stat().st_size > plugin_mod.BACKGROUND_MAX_BYTES
    loads = _Loads(monkeypatch)
    plugin, get = _client(tmp_path / "logdir")
    try:
        get("/traces")
        assert plugin.wait_idle(WAIT_S)
        states = {rel: r["state"] for rel, r in _rows(get).items()}
        assert states == {
            "run/w0.pt.trace.json": "new",
            "run/w1.pt.trace.json": "new",
            "run/w2.pt.trace.json": "done",
            "run/w3.pt.trace.json": "done",
            "run/w4.pt.trace.json": "new",  # too big for the background: analysed when opened
        }
        assert sorted(loads.paths) == sorted(str(p.resolve()) for p in paths[2:4])  # the others never read
        # a trace written later is the newest: the next list request queues it
        late = build_healthy(steps=3, gpu="A100").write(tmp_path / "logdir" / "run" / "w5.pt.trace.json")
        os.utime(late, ns=(1_900_000_000_000_000_000,) * 2)
        get("/traces")
        assert plugin.wait_idle(WAIT_S)
        rows = _rows(get)
        assert rows["run/w5.pt.trace.json"]["state"] == "done"
        assert [rel for rel, r in sorted(rows.items()) if r["state"] == "done"] == [
            "run/w2.pt.trace.json",  # already done: kept, not read again
            "run/w3.pt.trace.json",
            "run/w5.pt.trace.json",
        ]
        assert len(loads.paths) == 3
    finally:
        plugin.close()


def test_an_opened_trace_goes_first_and_no_trace_is_analysed_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    logdir = make_logdir(tmp_path / "logdir")
    slow = logdir / "slow" / "worker0.1700000000000.pt.trace.json.gz"
    os.utime(slow, ns=(1_000_000_000,) * 2)  # the oldest: last in the background order
    loads = _Loads(monkeypatch, hold=True)
    plugin, get = _client(logdir)
    try:
        ids = _ids(get)  # queues every trace; the first one read waits for `release`
        assert loads.started.wait(WAIT_S)
        tid = ids["slow/worker0.1700000000000.pt.trace.json.gz"]
        assert json.loads(get("/analyze", trace=tid)[1])["state"] == "queued"  # opened while it waits
        loads.release.set()
        assert _wait(get, tid)["state"] == "done"
        assert loads.paths[1] == str(slow.resolve())  # next after the one already running, not last
        for _ in range(2):  # opened again, its report and a diff: the same job, no second analysis
            get("/analyze", trace=tid)
            get("/report", trace=tid)
            get("/diff", a=tid, b=ids[CUT])
        assert plugin.wait_idle(WAIT_S)
        assert all(r["state"] in ("done", "broken") for r in _rows(get).values())
        assert set(Counter(loads.paths).values()) == {1} and len(loads.paths) == len(ids)
    finally:
        plugin.close()
    # a restarted server reads its reports from the cache: only the broken traces are read again
    again = _Loads(monkeypatch)
    plugin2, get2 = _client(logdir)
    try:
        get2("/traces")
        assert plugin2.wait_idle(WAIT_S)
        rows = _rows(get2)
        broken = {rel for rel, r in rows.items() if r["state"] == "broken"}
        assert broken == {TRUNCATED, "broken/worker0.1.pt.trace.json"}  # a cache hit was 'internal error'
        assert sorted(again.paths) == sorted(str((logdir / rel).resolve()) for rel in broken)
        assert rows["slow/worker0.1700000000000.pt.trace.json.gz"]["top"] == "dataloader-stall"
    finally:
        plugin2.close()


def test_hostile_file_names_stay_text_in_the_list(client):
    plugin, get = client
    get("/traces")
    assert plugin.wait_idle(WAIT_S)
    code, body, headers = get("/traces")
    assert code == 200 and headers["Content-Type"].startswith("application/json")
    assert "\u202e" not in body and "\x1b" not in body  # no raw bidi override or escape leaves the server
    row = _rows(get)[inert_text(f"{HOSTILE_RUN}/{HOSTILE_FILE}")]
    # the markup is kept as the name a user searches for, as a JSON string the tab sets as text; the
    # invisible characters are shown as escapes
    assert row["name"] == "<img src=y onerror=alert(2)>\\u202e\\x1b[31m.pt.trace.json"
    assert row["state"] == "done" and row["top"] == "dataloader-stall"  # its summary is listed too
    assert all(inert_text(row[k]) == row[k] for k in ("name", "rel", "top", "top_title", "headline", "quality_line"))


def test_a_restarted_server_serves_the_cached_report(client):
    # the second plugin (a TensorBoard restart) finds the report in traceinspect's cache: a hit was the
    # internal error 'a report is a JSON object, not Report'
    plugin, get = client
    tid = _ids(get)["slow/worker0.1700000000000.pt.trace.json.gz"]
    assert _wait(get, tid)["state"] == "done"
    again, get2 = _client(plugin._logdir)
    try:
        st = _wait(get2, tid)
        assert (st["state"], st["error"], st["top"]) == ("done", "", "dataloader-stall")
    finally:
        again.close()
