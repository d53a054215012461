"""The typed, immutable report model: to_dict/from_dict round-trip on every builder and every shared
trace, refusal of junk with a ValueError (never a traceback), immutability, analyze() idempotence, and
the format methods delegating to render/."""

from __future__ import annotations

import json

import importlib
import inspect
from pathlib import Path

import msgspec
import pytest

from builders import TraceBuilder, build_dataloader_stall, build_healthy
from traceinspect.api import render
from traceinspect.analyze import analyze
from traceinspect.render import RENDERERS
from traceinspect.report import SCHEMA_VERSION, Report, Steps, TraceInfo
from traceinspect.trace.model import load_trace

TESTS = Path(__file__).parent


def _builders():
    """Every build_* function of tests/builders*.py that takes no required argument."""
    out = []
    for mod_path in sorted(TESTS.glob("builders*.py")):
        mod = importlib.import_module(mod_path.stem)
        for name, make in sorted(vars(mod).items()):
            if (
                name.startswith("build_")
                and inspect.isfunction(make)
                and make.__module__ == mod.__name__
                and all(p.default is not inspect.Parameter.empty for p in inspect.signature(make).parameters.values())
            ):
                out.append(pytest.param(make, id=f"{mod_path.stem}.{name}"))
    return out


def _round_trip(rep: Report) -> None:
    """Through the saved JSON text (sorted keys, as `--format json` writes it): the same dict, the same
    JSON and the same text and Markdown as the fresh report."""
    import json

    d = rep.to_dict()
    back = Report.from_dict(json.loads(render(rep, "json")))
    assert back.to_dict() == json.loads(json.dumps(d, default=float))
    assert isinstance(back.trace, TraceInfo) and isinstance(back.steps, Steps)
    assert render(back, "json") == render(rep, "json")
    assert render(back, "text") == render(rep, "text") and render(back, "md") == render(rep, "md")


@pytest.mark.parametrize("make", _builders())
def test_round_trip_every_builder(make, tmp_path):
    built = make()
    if not isinstance(built, TraceBuilder):
        pytest.skip("not a plain trace builder")
    rep = analyze(load_trace(str(built.write(tmp_path / "t.pt.trace.json"))))
    _round_trip(rep)


def test_round_trip_every_shared_trace(shared_dir):
    from traceinspect.errors import TraceinspectError

    n = 0
    for p in sorted(shared_dir.rglob("*")):
        if not (p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name != "EXPECTED.json"):
            continue
        try:
            trace = load_trace(str(p))
        except TraceinspectError:
            continue  # a trace the CLI refuses has no report
        _round_trip(analyze(trace))
        n += 1
    assert n > 0


def test_an_older_report_is_migrated_once_in_from_dict(tmp_path):
    """Schema 3 requires the keys every report of this version writes. A report saved before it may lack
    some: those whose value may be null read as null ("not recorded"), one that cannot be null is refused
    with its name, and a schema-3 report that lacks a key is refused. The caller's dict is not changed."""
    d = analyze(load_trace(str(build_healthy().write(tmp_path / "t.pt.trace.json")))).to_dict()
    assert d["schema_version"] == SCHEMA_VERSION
    old = json.loads(json.dumps(d)) | {"schema_version": 2}
    del old["trace"]["world_size"], old["trace"]["gpu"]["num_sms"]
    back = Report.from_dict(old)
    assert back.trace.world_size is None and back.trace.gpu.num_sms is None
    assert "world_size" not in old["trace"]  # migrated on a copy
    assert back.to_dict()["trace"]["world_size"] is None and back.schema_version == 2
    with pytest.raises(ValueError, match="world_size|num_sms"):
        Report.from_dict(old | {"schema_version": 3})  # keys required from schema 3 on
    with pytest.raises(ValueError, match="world_size|num_sms"):
        Report.from_dict(old | {"schema_version": SCHEMA_VERSION})
    del old["trace"]["gpu"]["rocm"]  # a flag: null would be a third value
    with pytest.raises(ValueError, match="rocm"):
        Report.from_dict(old)


@pytest.mark.parametrize(
    "junk",
    [
        [],
        "report",
        {"schema_version": 2},
        {"schema_version": 2, "findings": [], "breakdown": {}, "trace": {"rank": "0"}},
        {"schema_version": 2, "findings": [], "breakdown": {}, "trace": {"gpu": "H100"}},
        {"schema_version": 2, "findings": [], "breakdown": {}, "ranks": [{"rank": 1.5}]},
        {"schema_version": 2, "findings": [], "breakdown": {"compute": {"us": "1"}}},
        {"schema_version": 9, "findings": [], "breakdown": {}},
    ],
)
def test_junk_is_a_value_error(junk):
    with pytest.raises(ValueError):
        Report.from_dict(junk)


def test_report_is_immutable(tmp_path):
    rep = analyze(load_trace(str(build_healthy().write(tmp_path / "t.pt.trace.json"))))
    with pytest.raises(AttributeError):
        rep.warnings = []
    with pytest.raises(AttributeError):
        rep.trace.rank = 1
    rep2 = msgspec.structs.replace(rep, warnings=["x"])
    assert rep2.warnings == ["x"] and rep.warnings != ["x"]


def test_analyze_is_idempotent(tmp_path):
    """A window under 1 ms adds a warning; analyze() used to append it to the Trace, so a second run
    on the same Trace reported it twice."""
    t = TraceBuilder()
    with t.step():
        t.op("aten::mm", kernels=[("ampere_sgemm_128x64_nn", 50.0)])
        t.item()
    trace = load_trace(str(t.write(tmp_path / "short.pt.trace.json")))
    first = analyze(trace).to_dict()
    assert sum("under 1 ms" in w for w in first["warnings"]) == 1
    assert analyze(trace).to_dict() == first


def test_api_render_is_the_renderers(tmp_path):
    """api.render is the one way to a document (the report model knows no renderer: no import circle)."""
    rep = analyze(load_trace(str(build_healthy().write(tmp_path / "t.pt.trace.json"))))
    for fmt, (fn, _) in RENDERERS.items():
        assert render(rep, fmt) == fn(rep, width=100)
    assert not any(hasattr(rep, m) for m in ("to_text", "to_markdown", "to_html", "to_json"))


def test_an_assumed_rank_is_reported_from_its_rank_source(tmp_path):
    """Two files, one named for rank 1 and one that states no rank (assumed 0): the lead is the slower
    one (rank 1, a dataloader stall), and the job report still says that the other's rank was assumed."""
    from builders import build_dataloader_stall
    from traceinspect.multirank import analyze_many

    d = tmp_path / "run"
    d.mkdir()
    fast = build_healthy().write(d / "plain.pt.trace.json")
    slow = build_dataloader_stall().write(d / "trace_rank1.pt.trace.json")
    rep = analyze_many([str(fast), str(slow)], jobs=1)
    assert rep.trace.rank == 1 and [r.rank for r in rep.ranks] == [0, 1]
    assumed = [w for w in rep.warnings if w.startswith("plain.pt.trace.json: ") and "assumed rank 0" in w]
    assert len(assumed) == 1


OLD_REPORTS = sorted((Path(__file__).parent / "data" / "old_reports").glob("*.json"))


@pytest.mark.parametrize("path", OLD_REPORTS, ids=lambda p: p.stem)
def test_reports_saved_by_earlier_versions_load_render_and_diff(path, tmp_path):
    """Reports written by earlier versions of this tool (schema 1 and 2, the dataloader-stall builder;
    the commit is in the file name) are migrated by from_dict, render in every format and diff against
    a report of this version."""
    from traceinspect.diff import diff
    from traceinspect.render import RENDERERS

    old = json.loads(path.read_text())
    assert old["schema_version"] < SCHEMA_VERSION
    rep = Report.from_dict(old)
    for fmt in RENDERERS:
        assert render(rep, fmt), fmt
    new = analyze(load_trace(str(build_dataloader_stall().write(tmp_path / "t.pt.trace.json"))))
    d = diff(rep, new)
    assert "dataloader-stall" in {f.name for f in d.persisting}, (d.resolved, d.new)


def test_old_report_fixtures_are_there():
    assert {p.stem.split("_")[0] for p in OLD_REPORTS} == {"schema1", "schema2"}
