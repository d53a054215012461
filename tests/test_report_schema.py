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
    assert committed == json_schema(), ("docs/report.schema.json is stale: regenerate it with "
                                        "`python -m traceinspect.report > docs/report.schema.json`")


@pytest.mark.parametrize("make", [build_healthy, build_dataloader_stall, build_launch_bound])
def test_builder_reports_validate(make, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    d = analyze(load_trace(str(make().write(tmp_path / "t.pt.trace.json")))).to_dict()
    jsonschema.validate(d, json_schema())
    d["trace"]["rank"] = "0"                # the schema can fail: a rank is an integer
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
