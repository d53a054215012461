"""docs/report.schema.json is generated from the typed report model and must match it; real reports
validate against it (when jsonschema is installed: the `test` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import build_dataloader_stall, build_healthy, build_launch_bound
from traceinspect.analyze import analyze
from traceinspect.report import json_schema
from traceinspect.trace.model import load_trace

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "report.schema.json"


def test_committed_schema_is_the_generated_one():
    committed = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert committed == json_schema(), (
        "docs/report.schema.json is stale: regenerate it with `python -m traceinspect.report > docs/report.schema.json`"
    )


@pytest.mark.parametrize("make", [build_healthy, build_dataloader_stall, build_launch_bound])
def test_builder_reports_validate(make, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    d = analyze(load_trace(str(make().write(tmp_path / "t.pt.trace.json")))).to_dict()
    jsonschema.validate(d, json_schema())
    d["trace"]["rank"] = "0"  # the schema can fail: a rank is an integer
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, json_schema())


def test_shared_reports_validate(shared_dir, expected):
    jsonschema = pytest.importorskip("jsonschema")
    from traceinspect.errors import TraceinspectError

    schema = json_schema()
    n = 0
    for p in sorted(shared_dir.rglob("*.json*")):
        if p.name == "EXPECTED.json" or not p.is_file():
            continue
        try:
            trace = load_trace(str(p))
        except TraceinspectError:
            continue
        jsonschema.validate(json.loads(json.dumps(analyze(trace).to_dict(), default=float)), schema)
        n += 1
    assert n > 0


@pytest.mark.parametrize(
    "case",
    [
        "steps without count",
        "verdict top without expected",
        "account part without name",
        "memory without source",
        "interval not a pair",
    ],
)
def test_schema_and_model_refuse_the_same_reports(case, tmp_path):
    """The published schema carries the model's own rules (types and each section's required fields):
    a report the model refuses on read, the schema refuses too, and the unmodified report passes both."""
    jsonschema = pytest.importorskip("jsonschema")
    from traceinspect.report import Report
    from builders_host import build_launch_bound_eager_attention

    d = json.loads(
        json.dumps(
            analyze(load_trace(str(build_launch_bound_eager_attention().write(tmp_path / "t.pt.trace.json")))).to_dict()
        )
    )
    jsonschema.validate(d, json_schema())
    Report.from_dict(d)
    assert d["verdict"]["top"] and d["account"]["parts"] and d["timeline_sample"]["intervals"]
    if case == "steps without count":
        del d["steps"]["count"]
    elif case == "verdict top without expected":
        del d["verdict"]["expected_step_us"]
    elif case == "account part without name":
        del d["account"]["parts"][0]["name"]
    elif case == "memory without source":
        d["memory"] = {"devices": []}
    else:
        part = next(iter(d["timeline_sample"]["intervals"]))
        d["timeline_sample"]["intervals"][part][0] = [1.0, 2.0, 3.0]
    with pytest.raises(ValueError):
        Report.from_dict(d)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, json_schema())
