"""HTML report: self-contained, escaped, charts when matplotlib is there and tables when it is not.
Also the timeline sample it draws and the Markdown --assets charts."""

import json
import re

import msgspec
import pytest
from click.testing import CliRunner

from builders import ELEMENTWISE, TraceBuilder, build_dataloader_stall, build_healthy, build_launch_bound
from traceinspect.analyze import analyze
from traceinspect.cli import cli
from traceinspect.render import RENDERERS, charts, format_for_path
from traceinspect.render.html import render
from traceinspect.render.markdown import render_with_assets
from traceinspect.report import Report
from traceinspect.timeline_sample import _cap, _coalesce, representative_step
from traceinspect.trace.model import load_trace

needs_mpl = pytest.mark.skipif(
    not charts.available(), reason="matplotlib is not installed (pip install -e '.[html]' in the traceinspect checkout)"
)

XSS_KERNEL = "<script>alert(1)</script>"
XSS_ANNOTATION = "<img src=x onerror=alert(2)>&amp;"


def report_of(builder, tmp_path, name="t.pt.trace.json"):
    """What analyze() returns once the lead's hook fills timeline_sample (set here explicitly)."""
    trace = load_trace(builder.write(tmp_path / name))
    rep = analyze(trace)
    return msgspec.structs.replace(rep, timeline_sample=representative_step(trace))


def crafted(steps=3) -> TraceBuilder:
    """A DataLoader stall whose kernel and annotation names carry markup."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(20_000)
            with t.span(XSS_ANNOTATION, cat="user_annotation"):
                t.op("aten::add", kernels=[(XSS_KERNEL, 5_000), (ELEMENTWISE, 200)])
    return t


def embedded_json(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="traceinspect-data">(.*?)</script>', page, re.S)
    assert m, "the report's JSON is embedded"
    return json.loads(m.group(1))


def test_html_is_registered_and_guessed_from_the_extension():
    assert "html" in RENDERERS
    assert format_for_path("out/report.html") == "html"


def test_page_is_self_contained_and_leads_with_the_verdict(tmp_path):
    rep = report_of(build_dataloader_stall(), tmp_path)
    page = render(rep)
    assert page.startswith("<!DOCTYPE html>")
    # verdict before the breakdown and the findings
    assert page.index('id="verdict"') < page.index('id="breakdown"') < page.index('id="findings"')
    assert rep.verdict["top_title"] in page
    # nothing is fetched: no external src/href, and the CSP forbids scripts and remote loads
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page)
    assert "default-src 'none'" in page
    assert len(page.encode()) < 2 << 20
    for section in ("kernels", "environment"):
        assert f'id="{section}"' in page
    assert "NVIDIA H100 80GB HBM3" in page  # the builder's GPU (tests/builders.py DEVICE_PROPS)


def test_embedded_json_is_the_canonical_report(tmp_path):
    rep = report_of(build_dataloader_stall(), tmp_path)
    data = embedded_json(render(rep))
    canonical = json.loads(RENDERERS["json"][0](rep))
    assert data == canonical
    assert Report.from_dict(data).timeline_sample == rep.timeline_sample


def test_trace_names_with_markup_render_as_text(tmp_path):
    rep = report_of(crafted(), tmp_path)
    assert any(k["name"] == XSS_KERNEL for k in rep.top_kernels)
    page = render(rep)
    # the only <script> element is the inert JSON block, and no markup from the trace survives
    assert page.count("<script") == 1
    assert XSS_KERNEL not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # inside the JSON block "<" is \u003c, so "</script>" cannot close it early
    assert embedded_json(page)["top_kernels"][0]["name"] == XSS_KERNEL


@needs_mpl
def test_charts_are_inline_svg(tmp_path):
    page = render(report_of(build_dataloader_stall(), tmp_path))
    for chart in ("chart-breakdown", "chart-timeline"):
        assert re.search(f'id="{chart}"><svg', page)
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page


def test_without_matplotlib_tables_and_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "available", lambda: False)
    rep = report_of(build_dataloader_stall(), tmp_path)
    page = render(rep)
    assert "<svg" not in page
    assert 'id="no-charts"' in page and ".[html]" in page
    assert "idle: waiting for the DataLoader" in page  # the breakdown table is still there


def test_output_is_deterministic(tmp_path):
    rep = report_of(build_healthy(), tmp_path)
    assert render(rep) == render(rep)


def test_cli_writes_html_from_the_extension(tmp_path):
    trace = build_dataloader_stall().write(tmp_path / "stall.pt.trace.json.gz")
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["analyze", str(trace), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("<!DOCTYPE html>")


# --- the timeline sample -------------------------------------------------------------------------


def test_representative_step_is_the_median_step(tmp_path):
    t = TraceBuilder()
    for load in (10_000, 40_000, 20_000):  # step lengths rank 1st, 3rd, 2nd: the median is the third step
        with t.step(wait_gpu=True):
            t.dataloader(load)
            t.op("aten::add", kernels=[(ELEMENTWISE, 1_000)])
    trace = load_trace(t.write(tmp_path / "t.json"))
    ts = representative_step(trace)
    assert ts["index"] == 2 and ts["step"] == 12  # builder steps are numbered from 10
    # the DataLoader wait of that step (20 ms) shows as idle_dataloader intervals, times relative to its start
    dl = ts["intervals"]["idle_dataloader"]
    assert sum(b - a for a, b in dl) == pytest.approx(20_000, abs=ts["resolution_us"] * len(dl) + 1)
    assert all(0 <= a < b <= ts["dur_us"] for part in ts["intervals"].values() for a, b in part)


def test_representative_step_totals_match_the_breakdown(tmp_path):
    trace = load_trace(build_dataloader_stall().write(tmp_path / "t.json"))
    ts = representative_step(trace)
    row = analyze(trace).steps["per_step"][ts["index"]]["breakdown_us"]
    for part, spans in ts["intervals"].items():
        drawn = sum(b - a for a, b in spans)
        # each part is drawn at its true extent: only the 0.1 us rounding of each bar's ends differs
        assert drawn == pytest.approx(row[part], abs=0.1 * len(spans) + 0.01)


def test_idle_between_back_to_back_kernels_is_drawn_at_its_true_extent(tmp_path):
    # a burst of 2000 kernels of 10 us each, 1 us apart, all queued ahead (the host launches one per 5 us):
    # the 1 us gaps are unattributed idle, ~2 ms of a ~22 ms burst, closer together than a chart column.
    # Merging nearby gaps drew them as one solid block over the burst (and compute as solid over the
    # gaps); each part must total its true time, and no idle bar be wider than a column
    t = TraceBuilder()
    for _ in range(3):
        with t.step(wait_gpu=True):
            with t.span("aten::mm"):
                for _ in range(2000):
                    t.kernel(ELEMENTWISE, 10)
                    t.stream_free[7] += 1.0  # the next kernel starts 1 us after this one ends
    trace = load_trace(t.write(tmp_path / "t.json"))
    ts = representative_step(trace)
    row = analyze(trace).steps["per_step"][ts["index"]]["breakdown_us"]
    unk = ts["intervals"].get("idle_unknown", [])
    assert row["idle_unknown"] > 0
    assert sum(b - a for a, b in unk) == pytest.approx(row["idle_unknown"], abs=0.1 * len(unk) + 0.01)
    assert sum(b - a for a, b in ts["intervals"]["compute"]) == pytest.approx(row["compute"], abs=0.1 * len(unk) + 1)
    # no bar of idle is wider than a column: the burst is not painted over
    assert max(b - a for a, b in unk) <= ts["resolution_us"] + 0.1


def test_representative_step_is_empty_without_gpu(tmp_path):
    t = TraceBuilder()
    with t.step():
        t.cpu(1000)
    assert not representative_step(load_trace(t.write(tmp_path / "t.json")))


def test_timeline_sample_is_capped(tmp_path, monkeypatch):
    import traceinspect.timeline_sample as tsm

    monkeypatch.setattr(tsm, "MAX_INTERVALS", 50)
    trace = load_trace(build_launch_bound(steps=3, kernels_per_step=2000).write(tmp_path / "t.json"))
    ts = representative_step(trace)
    # 2000 kernels and ~2000 launch gaps in the step: a compute and a launch-gap bar in most of the
    # PIXELS columns, well over the cap
    assert sum(len(v) for v in ts["intervals"].values()) == 50 and ts["dropped"] > 0


def test_coalesce_and_cap():
    import numpy as np

    s, e = _coalesce(np.array([0.0, 10.5, 30.0]), np.array([10.0, 20.0, 40.0]), 1.0)
    assert s.tolist() == [0.0, 30.0] and e.tolist() == [20.0, 40.0]  # the 0.5 us gap closes, the 10 us one stays
    parts, dropped = _cap({"a": [[0, 1], [2, 10]], "b": [[0, 5]]}, 2)
    assert parts == {"a": [[2, 10]], "b": [[0, 5]]} and dropped == 1  # the shortest (1 us) goes


def test_report_json_without_a_timeline_keeps_its_shape(tmp_path):
    from builders import TraceBuilder

    t = TraceBuilder()
    with t.step():
        t.op("aten::mm", cpu_us=500)  # CPU-only: no GPU timeline to sample
    rep = analyze(load_trace(t.write(tmp_path / "t.json")))
    assert "timeline_sample" not in rep.to_dict()
    assert not Report.from_dict(rep.to_dict()).timeline_sample  # empty: absent, and left out of the JSON again


# --- Markdown --assets -------------------------------------------------------------------------------


@needs_mpl
def test_markdown_assets_are_written_and_linked(tmp_path):
    rep = report_of(build_dataloader_stall(), tmp_path)
    md = render_with_assets(rep, tmp_path / "out" / "charts", relative_to=str(tmp_path / "out" / "r.md"))
    for name in ("step-breakdown.svg", "step-timeline.svg"):
        assert (tmp_path / "out" / "charts" / name).read_text().startswith("<svg")
        assert f"(charts/{name})" in md
    assert md.index("step-breakdown.svg") < md.index("### Where each step goes")


def test_markdown_assets_without_matplotlib_is_a_usage_error(tmp_path, monkeypatch):
    from traceinspect.errors import UsageError

    monkeypatch.setattr(charts, "available", lambda: False)
    with pytest.raises(UsageError, match="matplotlib"):
        render_with_assets(report_of(build_healthy(), tmp_path), tmp_path / "a")


@needs_mpl
def test_many_steps_stay_small(tmp_path):
    t = TraceBuilder()
    for _ in range(400):  # more than charts.MAX_BARS: drawn as stacked areas
        with t.step():
            t.op("aten::add", kernels=[(ELEMENTWISE, 50)])
    page = render(report_of(t, tmp_path))
    assert len(page.encode()) < 2 << 20
    assert 'id="chart-breakdown"><svg' in page


def test_matplotlib_is_imported_only_to_draw():
    import subprocess
    import sys

    code = (
        "import sys, traceinspect.cli, traceinspect.render, traceinspect.render.html, traceinspect.diff; "
        "assert 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_poisoned_saved_report_is_escaped_in_every_field(tmp_path):
    """A cached or saved report can hold markup anywhere, numbers included (the audit's `rank`)."""
    import dataclasses

    rep = report_of(crafted(), tmp_path)
    d = rep.to_dict()
    d["trace"]["rank"] = XSS_ANNOTATION
    with pytest.raises(ValueError):  # refused on read (a saved report: exit 3; cache: a miss)
        Report.from_dict(d)
    # the renderer stays safe whatever it is given: poison the object itself
    rep = msgspec.structs.replace(  # msgspec does not validate on construction
        rep,
        trace=msgspec.structs.replace(rep.trace, rank=XSS_ANNOTATION),
        steps=msgspec.structs.replace(rep.steps, count=XSS_ANNOTATION),
        top_kernels=[msgspec.structs.replace(rep.top_kernels[0], count=XSS_ANNOTATION)] + rep.top_kernels[1:],
        breakdown={**rep.breakdown, "compute": msgspec.structs.replace(rep.breakdown["compute"], frac=XSS_ANNOTATION)},
        findings=[dataclasses.replace(rep.findings[0], time_lost_frac=XSS_ANNOTATION, confidence=XSS_KERNEL)]
        + rep.findings[1:],
    )
    page = render(rep)
    assert "<img" not in page and page.count("<script") == 1
    assert "&lt;img src=x onerror=alert(2)&gt;&amp;amp;" in page  # shown, escaped once


@pytest.mark.parametrize("value", [1e308, -1e308, 1e13 * 1e3])
def test_a_number_too_large_to_draw_leaves_out_its_chart_not_the_page(tmp_path, value):
    """A saved report can hold any JSON number; stacked, 1e308s overflow inside matplotlib (RuntimeWarnings
    and a broken chart). The chart is left out, the rest of the page and its tables stay."""
    pytest.importorskip("matplotlib")
    import warnings

    d = analyze(load_trace(build_dataloader_stall().write(tmp_path / "t.pt.trace.json"))).to_dict()
    d["steps"]["per_step"][0]["breakdown_us"]["compute"] = value
    d["timeline_sample"]["dur_us"] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = render(Report.from_dict(d))
    assert 'id="chart-breakdown"' not in page and 'id="chart-timeline"' not in page
    assert 'id="breakdown"' in page and 'id="findings"' in page
    assert 'id="chart-breakdown"><svg' in render(
        Report.from_dict(analyze(load_trace(build_dataloader_stall().write(tmp_path / "u.json"))).to_dict())
    )
