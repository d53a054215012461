"""annotate: the trace with findings drawn in as a "traceinspect" process. The result is Chrome-trace JSON,
the original events are kept (bytes where possible), the analyzer ignores the additions, and the slices
of each finding add up to the time lost it claims."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from builders import TraceBuilder, build_dataloader_stall, build_healthy, build_launch_bound
from builders_compute import build_fp32_gemm
from builders_host import build_allocator_churn, build_item_sync
from test_html import XSS_KERNEL, crafted
from traceinspect.analyze import analyze
from traceinspect.annotate import CATEGORY, PROCESS, annotate_file
from traceinspect.cli import cli
from traceinspect.trace.model import load_trace


def _annotate(builder: TraceBuilder, tmp_path, out="out.json.gz"):
    src = builder.write(tmp_path / "t.pt.trace.json")
    trace = load_trace(src)
    report = analyze(trace)
    annotate_file(str(src), str(tmp_path / out), trace, report)
    raw = (tmp_path / out).read_bytes()
    return src, report, (gzip.decompress(raw) if out.endswith(".gz") else raw)


def _ours(doc: dict) -> list[dict]:
    pid = next(
        e["pid"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == PROCESS
    )
    return [e for e in doc["traceEvents"] if e.get("pid") == pid]


def _comparable(report) -> dict:
    d = report.to_dict()
    d["trace"] = {k: v for k, v in d["trace"].items() if k not in ("file", "file_bytes", "json_bytes", "events")}
    return d


# findings whose claimed intervals make up their whole time lost (idle claims, or fp32-gemm's kernels)
ITEMISED = {"dataloader-stall", "launch-bound", "fp32-gemm", "host-sync", "allocator-churn"}


@pytest.mark.parametrize(
    "builder",
    [build_dataloader_stall, build_launch_bound, build_fp32_gemm, build_item_sync, build_allocator_churn],
    ids=lambda b: b.__name__,
)
def test_slices_of_each_finding_add_up_to_its_time_lost(builder, tmp_path):
    _, report, data = _annotate(builder(), tmp_path)
    ours = _ours(json.loads(data))
    assert report.findings
    tracks = {e["args"]["name"]: e["tid"] for e in ours if e["name"] == "thread_name"}
    for i, f in enumerate(report.findings, 1):
        assert tracks[f"{i}. {f.name} ({f.code})"] == i
        slices = [e for e in ours if e.get("ph") == "X" and e["tid"] == i]
        assert slices and all(s["name"] == f.name and s["args"]["fix"] == f.fix for s in slices)
        if "time_lost_us" in slices[0]["args"]:  # claimed intervals, not examples
            lost = sum(s["args"]["time_lost_us"] for s in slices)
            # the idle a finding claims is at most its time lost (Detector.finding scales it down to fit)
            assert lost <= f.time_lost_us * (1 + 1e-9) + 1e-3
            assert sum(f.idle_claims_us.values()) <= lost + 1e-3
            assert all(0 <= s["args"]["time_lost_us"] <= s["dur"] + 1e-3 for s in slices)
        if f.name in ITEMISED:
            assert sum(s["args"]["time_lost_us"] for s in slices) == pytest.approx(f.time_lost_us, rel=1e-9, abs=1e-3)


def test_the_named_findings_are_itemised_over_their_exact_intervals(tmp_path):
    # build_dataloader_stall: 4 steps, each waiting load_us=30 ms in the DataLoader with the GPU idle, so
    # one 30 ms slice per step, each its own whole duration lost
    _, report, data = _annotate(build_dataloader_stall(steps=4, load_us=30_000), tmp_path)
    ours = _ours(json.loads(data))
    i = [f.name for f in report.findings].index("dataloader-stall") + 1
    slices = [e for e in ours if e.get("ph") == "X" and e["tid"] == i]
    assert len(slices) == 4
    assert all(
        s["dur"] == pytest.approx(30_000, abs=50) and s["args"]["time_lost_us"] == pytest.approx(s["dur"])
        for s in slices
    )


def test_one_marker_per_step_with_its_breakdown(tmp_path):
    _, report, data = _annotate(build_dataloader_stall(steps=4), tmp_path)
    marks = [e for e in _ours(json.loads(data)) if e.get("ph") == "i"]
    assert len(marks) == report.steps["count"] == 4
    for m in marks:
        parts = m["args"]["breakdown_us"]
        assert sum(parts.values()) == pytest.approx(m["args"]["dur_us"], abs=0.01)  # every us in one part


def test_original_events_are_kept_byte_for_byte_and_the_report_is_the_same(tmp_path):
    src, report, data = _annotate(build_dataloader_stall(), tmp_path, out="out.json")
    orig = src.read_bytes()
    at = orig.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    assert data.startswith(orig[:at]) and data.endswith(orig[at:])  # only an insertion
    doc, before = json.loads(data), json.loads(orig)
    assert doc["traceEvents"][-len(before["traceEvents"]) :] == before["traceEvents"]
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        k: v for k, v in before.items() if k != "traceEvents"
    }
    again = analyze(load_trace(tmp_path / "out.json"))
    assert _comparable(again) == _comparable(report)


def test_every_added_event_is_well_formed_chrome_trace(tmp_path):
    _, _, data = _annotate(build_launch_bound(), tmp_path)
    for e in _ours(json.loads(data)):
        assert e["ph"] in ("M", "X", "i") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert e["cat"] == CATEGORY and isinstance(e["ts"], float)
        if e["ph"] == "X":
            assert e["dur"] >= 0


def test_markup_from_the_trace_stays_inert(tmp_path):
    _, report, data = _annotate(crafted(), tmp_path, out="out.json")
    orig_len = len((tmp_path / "t.pt.trace.json").read_bytes())
    added = data[: len(data) - orig_len]
    assert b"<" not in added and b">" not in added  # escaped as \u003c, still the same JSON string
    # the exemplar names reach the args intact once decoded (escaping changes bytes, not values)
    whats = " ".join(e["args"].get("what", "") for e in _ours(json.loads(data)) if e.get("ph") == "X")
    assert report.findings and "<" in XSS_KERNEL
    assert XSS_KERNEL in whats or all(ev.name != XSS_KERNEL for f in report.findings for ev in f.events)


def test_a_top_level_array_and_an_ambiguous_key_are_annotated_too(tmp_path):
    # a trace that is a bare array of events (Chrome's other form), and one whose metadata also holds a
    # "traceEvents" key: both are written again with every original event kept
    doc = build_dataloader_stall().build()
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps(doc["traceEvents"]))
    amb = tmp_path / "amb.json"
    amb.write_text(json.dumps({"meta": {"traceEvents": [1]}, **doc}))
    # the top-level key spelled with a JSON escape: the only textual match is the nested one
    esc = tmp_path / "esc.json"
    esc.write_text(
        json.dumps({"meta": {"traceEvents": [1]}, **{k: v for k, v in doc.items() if k != "traceEvents"}})[:-1]
        + ', "trace\\u0045vents": '
        + json.dumps(doc["traceEvents"])
        + "}"
    )
    assert json.loads(esc.read_text())["meta"] == {"traceEvents": [1]}
    for src in (arr, amb, esc):
        trace = load_trace(src)
        annotate_file(str(src), str(tmp_path / "o.json"), trace, analyze(trace))
        out = json.loads((tmp_path / "o.json").read_text())
        events = out if isinstance(out, list) else out["traceEvents"]
        assert events[-len(doc["traceEvents"]) :] == doc["traceEvents"]
        assert any(e.get("cat") == CATEGORY for e in events)
        if not isinstance(out, list):
            assert out["meta"] == {"traceEvents": [1]}  # the nested key is left alone


def test_cli_annotate_and_analyze_annotate(tmp_path):
    src = build_launch_bound().write(tmp_path / "t.pt.trace.json")
    r = CliRunner().invoke(cli, ["annotate", str(src), "-o", str(tmp_path / "a.json.gz")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["analyze", str(src), "--annotate", str(tmp_path / "b.json"), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["verdict"]["top"] == "launch-bound"
    assert any(e.get("cat") == CATEGORY for e in json.loads((tmp_path / "b.json").read_text())["traceEvents"])


@pytest.mark.parametrize("case,code", [("missing", 3), ("dir", 2), ("self", 2), ("truncated", 3)])
def test_cli_annotate_bad_input_is_one_line_not_a_traceback(case, code, tmp_path):
    src = build_healthy().write(tmp_path / "t.pt.trace.json")
    out = str(tmp_path / "o.json")
    if case == "missing":
        src = tmp_path / "nope.json"
    elif case == "dir":
        build_healthy().write(tmp_path / "u.pt.trace.json")
        src = tmp_path
    elif case == "self":
        out = str(src)
    elif case == "truncated":
        src.write_bytes(src.read_bytes()[: len(src.read_bytes()) * 2 // 3])
    r = CliRunner().invoke(cli, ["annotate", str(src), "-o", out])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and str(src) in r.output


# --- real traces (skipped where ../shared/traces is absent) ------------------------------------------


def _real_cases():
    from conftest import SHARED, shared_available

    if not shared_available():
        return []
    judged = [t for t in json.loads((SHARED / "EXPECTED.json").read_text())["traces"] if not t.get("load_only")]
    # one trace per itemised claim kind is enough to check the invariant on real data (CPU is shared)
    picked, seen = [], set()
    for t in judged:
        new = set(t.get("must", [])) & ITEMISED - seen
        if new:
            picked.append(t["path"])
            seen |= new
    return picked


@pytest.mark.parametrize("rel", _real_cases(), ids=lambda r: r.split("/")[-1][:40])
def test_real_traces_annotate_with_claims_that_add_up(rel, shared_dir, tmp_path):
    src = shared_dir / rel
    trace = load_trace(src)
    report = analyze(trace)
    out = tmp_path / (src.name if src.name.endswith(".gz") else src.name + ".gz")  # the rank comes from the name
    annotate_file(str(src), str(out), trace, report)
    ours = _ours(json.loads(gzip.decompress(out.read_bytes())))
    for i, f in enumerate(report.findings, 1):
        if f.name in ITEMISED:
            lost = [s["args"]["time_lost_us"] for s in ours if s.get("ph") == "X" and s["tid"] == i]
            assert sum(lost) == pytest.approx(f.time_lost_us, rel=1e-9, abs=1e-3), f.name
    assert _comparable(analyze(load_trace(out))) == _comparable(report)


def test_tracks_are_numbered_as_the_report_numbers_the_findings(tmp_path):
    """One numbering: the text report's "N. name (code)" of each finding is the number of that
    finding's track in the annotated trace."""
    import re

    import builders_host as bh
    from traceinspect.render.text import render

    src, report, data = _annotate(bh.build_launch_bound_eager_attention(), tmp_path)
    assert len(report.findings) >= 2  # launch-bound and eager attention
    text = render(report)
    in_report = {m.group(2): int(m.group(1)) for m in re.finditer(r"^(?:  - )?(\d+)\. (\S+) \(TI\d+\)", text, re.M)}
    tracks = {
        e["args"]["name"].split(". ", 1)[1].split(" (")[0]: int(e["args"]["name"].split(".")[0])
        for e in _ours(json.loads(data))
        if e["name"] == "thread_name" and e["tid"] > 0
    }
    assert in_report == tracks and sorted(tracks.values()) == list(range(1, len(report.findings) + 1))
