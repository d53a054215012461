"""Unknown is a value: a profiler option the trace does not state is null in JSON and "unknown" in
the report, or inferred from the events with its source named; diff never calls unknown -> known a change."""

from __future__ import annotations

import json

from builders import build_healthy
from traceinspect.analyze import analyze
from traceinspect.diff import diff
from traceinspect.render import html
from traceinspect.trace.model import load_trace


def _trace(tmp_path, name: str, *, shapes: bool, drop=("record_shapes",), **meta):
    t = build_healthy()
    if shapes:
        with t.step():
            t.op("aten::mm", kernels=[("sm90_xmma_gemm_bf16", 50.0)], input_dims=[[64, 64], [64, 64]])
    doc = t.build()
    for k in drop:
        doc.pop(k, None)
    if not shapes:  # no event shows the shapes either
        for e in doc["traceEvents"]:
            (e.get("args") or {}).pop("Input Dims", None)
    doc.update(meta)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return load_trace(path)


def test_an_absent_option_is_unknown_not_false(tmp_path):
    rep = analyze(_trace(tmp_path, "a.json", shapes=False))
    prof = rep.to_dict()["trace"]["profiler"]
    assert prof["record_shapes"] is None and prof["with_modules"] is None and prof["with_flops"] is None
    assert "record_shapes" not in (rep.trace.get("profiler_source") or {})
    assert '<th scope="row">profiler: record_shapes</th><td>unknown</td>' in html.render(rep)


def test_shapes_are_inferred_from_input_dims_with_the_source_named(tmp_path):
    rep = analyze(_trace(tmp_path, "a.json", shapes=True))
    assert rep.trace["profiler"]["record_shapes"] is True
    assert rep.trace["profiler_source"]["record_shapes"] == "inferred from Input Dims args"
    assert "inferred from Input Dims args" in html.render(rep)


def test_the_metadata_wins_and_false_stays_false(tmp_path):
    tr = _trace(tmp_path, "a.json", shapes=True, record_shapes=False, with_flops=True)
    assert tr.meta.profiler["record_shapes"] is False and tr.meta.profiler["with_flops"] is True
    assert tr.meta.profiler_source == {"record_shapes": "metadata", "with_flops": "metadata"}


def test_diff_does_not_call_unknown_to_known_a_change(tmp_path):
    unknown = analyze(_trace(tmp_path, "a.json", shapes=False))
    stated = analyze(_trace(tmp_path, "b.json", shapes=False, record_shapes=True, with_modules=True))
    off = analyze(_trace(tmp_path, "c.json", shapes=False, record_shapes=False))
    assert not [e for e in diff(unknown, stated).environment if e["field"].startswith("profiler option")]
    changed = [e["field"] for e in diff(stated, off).environment]
    assert "profiler option: record_shapes" in changed  # a stated True -> a stated False still counts


def test_a_saved_report_with_unknowns_round_trips(tmp_path):
    from traceinspect.report import Report

    rep = analyze(_trace(tmp_path, "a.json", shapes=True))
    back = Report.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back.trace["profiler"] == rep.trace["profiler"]
    assert back.trace["profiler_source"] == rep.trace["profiler_source"]
