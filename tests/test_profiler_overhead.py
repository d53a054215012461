"""Issue 27, check 6: the profiler-overhead estimate (facts/profiler_overhead.py) from the trace's
metadata, the capture metadata or the events, and what host-bound does when the estimate covers it."""

from __future__ import annotations

import pytest

import builders_profiler as bp
from traceinspect.analyze import analyze
from traceinspect.facts.profiler_overhead import COSTS, profiler_overhead
from traceinspect.trace.model import load_trace

COST = {c.setting: c.us for c in COSTS}


def _load(b, tmp_path):
    return load_trace(b.write(tmp_path / "t.pt.trace.json"))


def _host_bound(rep):
    return next(f for f in rep.findings if f.name == "host-bound")


def test_estimate_from_metadata(tmp_path):
    t = _load(bp.build_host_bound_profiled().settings(with_stack=1, profile_memory=1), tmp_path)
    ov = profiler_overhead(t)
    by = {s.setting: s for s in ov.settings}
    assert set(by) == {"with_stack", "record_shapes", "profile_memory"}
    assert {s.source for s in ov.settings} == {"metadata"}
    # per step: OV_PY_PER_STEP Python events, OV_OPS_PER_STEP ops, OV_MEM_PER_STEP [memory] events
    assert by["with_stack"].units_per_step == bp.OV_PY_PER_STEP
    assert by["record_shapes"].units_per_step == bp.OV_OPS_PER_STEP
    assert by["profile_memory"].units_per_step == bp.OV_MEM_PER_STEP
    expected = (
        bp.OV_PY_PER_STEP * COST["with_stack"]
        + bp.OV_OPS_PER_STEP * COST["record_shapes"]
        + bp.OV_MEM_PER_STEP * COST["profile_memory"]
    )
    assert ov.us_per_step == pytest.approx(expected)
    assert ov.window_us == pytest.approx(expected * bp.OV_STEPS)
    assert ov.settings[0].setting == "with_stack"  # the costliest first
    assert any(e.startswith("with_stack on (metadata): 2,000 Python function events") for e in ov.evidence)


def test_estimate_inferred_from_events(tmp_path):
    # no profiler keys at the top level: each setting is inferred from what it recorded
    t = _load(bp.build_host_bound_profiled().settings(record_shapes=None), tmp_path)
    src = {s.setting: s.source for s in profiler_overhead(t).settings}
    assert src == {
        "with_stack": "inferred from python_function events",
        "record_shapes": "inferred from Input Dims args",
        "profile_memory": "inferred from [memory] events",
    }


def test_estimate_from_capture_metadata_and_off_settings_cost_nothing(tmp_path):
    b = bp.build_host_bound_profiled(py_per_step=0, mem_per_step=0).settings(record_shapes=None)
    b.meta["traceinspect"] = {
        "schema_version": 1,
        "source": "loop",
        "config": {},
        "steps": [],
        "profiler": {"record_shapes": False, "with_stack": True, "profile_memory": False, "with_flops": False},
    }
    t = _load(b, tmp_path)
    ov = profiler_overhead(t)
    # with_stack said on by the capture, but no Python event recorded: nothing to count; record_shapes
    # said off by the capture, though `Input Dims` are present: the capture's word wins
    assert [(s.setting, s.source, s.us_per_step) for s in ov.settings] == [("with_stack", "capture metadata", 0.0)]
    assert t.meta.profiler["record_shapes"] is False


def test_with_flops_implies_record_shapes(tmp_path):
    t = _load(
        bp.build_host_bound_profiled(py_per_step=0, mem_per_step=0).settings(record_shapes=None, with_flops=1), tmp_path
    )
    # with_flops' cost is measured over record_shapes, which it turns on: both count per op
    by = {s.setting: s for s in profiler_overhead(t).settings}
    assert by["record_shapes"].source in ("implied by with_flops", "inferred from Input Dims args")
    assert profiler_overhead(t).us_per_step == pytest.approx(
        bp.OV_OPS_PER_STEP * (COST["with_flops"] + COST["record_shapes"])
    )


def test_host_bound_confidence_drops_when_the_estimate_covers_it(tmp_path):
    t = _load(bp.build_host_bound_profiled().settings(with_stack=1), tmp_path)
    f = _host_bound(analyze(t))
    # the claim is ~OV_CPU_US per step; the with_stack estimate (2,000 x 0.35 us = 700 us per step) alone
    # takes it under host-bound's 3% threshold
    assert f.confidence == "low"
    assert f.fix.startswith("Re-capture without with_stack before acting on this")
    labels = [e.label for e in f.evidence]
    assert any(lb.startswith("profiler overhead estimate") for lb in labels)
    assert any(lb.startswith("of which with_stack (metadata): 2,000 Python function events/step") for lb in labels)


def test_host_bound_keeps_its_confidence_without_with_stack(tmp_path):
    t = _load(bp.build_host_bound_profiled(py_per_step=0), tmp_path)
    f = _host_bound(analyze(t))
    assert f.confidence != "low" and not f.fix.startswith("Re-capture")


def test_real_trace_host_bound_within_the_with_stack_overhead(shared_dir):
    """resnet_act_checkpoint (MI300, with_stack + record_shapes in its metadata): host-bound claims under
    1 ms per step of a ~16 ms step while the trace records ~11,000 Python calls per step, whose estimated
    cost alone covers the claim: the finding drops to low and asks for a re-capture. The timesformer
    trace's host-bound (over half of each step) is far beyond its estimate and keeps its confidence."""
    t = load_trace(shared_dir / "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz")
    f = _host_bound(analyze(t))
    assert f.confidence == "low" and f.fix.startswith("Re-capture without with_stack")
    t = load_trace(
        shared_dir / "AMD-AGI__TraceLens/tests/traces/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    )
    f = _host_bound(analyze(t))
    assert f.confidence == "high" and not f.fix.startswith("Re-capture")
    assert any(e.label.startswith("profiler overhead estimate") for e in f.evidence)


def _overhead_row(rep):
    return next(c for c in rep.trace_quality.checks if c.check == "profiler-overhead")


def test_quality_row_is_limited_when_the_estimate_reaches_the_threshold(tmp_path):
    from traceinspect.facts.trace_quality import OVERHEAD_LIMITED_FRAC

    t = _load(bp.build_host_bound_profiled().settings(with_stack=1), tmp_path)
    rep = analyze(t)
    c = _overhead_row(rep)
    ov = profiler_overhead(t)
    win = float(t.steps["dur_us"].sum())
    # the share is the estimate over the analysed steps, derived here from the same two quantities
    assert c.values["share_of_steps"] == pytest.approx(ov.window_us / win)
    assert c.values["share_of_steps"] >= OVERHEAD_LIMITED_FRAC
    assert c.values["host_us_per_step"] == pytest.approx(ov.us_per_step)
    assert c.status == "limited"
    assert "capture without with_stack" in c.short
    assert rep.trace_quality.status in ("limited", "poor")
    assert "with_stack" in rep.trace_quality.line


def test_quality_row_is_ok_when_only_record_shapes_was_on(tmp_path):
    from traceinspect.facts.trace_quality import OVERHEAD_LIMITED_FRAC

    # no Python or [memory] events: record_shapes alone (inferred from Input Dims) costs 21 ops x 0.19 us
    t = _load(bp.build_host_bound_profiled(py_per_step=0, mem_per_step=0).settings(record_shapes=None), tmp_path)
    c = _overhead_row(analyze(t))
    assert [s.setting for s in profiler_overhead(t).settings] == ["record_shapes"]
    assert c.values["host_us_per_step"] == pytest.approx(bp.OV_OPS_PER_STEP * COST["record_shapes"])
    assert c.values["share_of_steps"] < OVERHEAD_LIMITED_FRAC
    assert c.status == "ok" and c.short == ""
    assert c.summary.startswith("record_shapes on: about")
