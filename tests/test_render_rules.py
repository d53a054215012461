"""Rules every rendered format shares (issue 32): items below the report's resolution say "none" or are
left out; one numbering; the text report fits its width."""

from __future__ import annotations

import re

import pytest

from builders import build_dataloader_stall
from traceinspect.analyze import analyze
from traceinspect.render import RENDERERS
from traceinspect.report import Report
from traceinspect.trace.model import load_trace


def _report(builder, tmp_path) -> dict:
    return analyze(load_trace(builder.write(tmp_path / "t.pt.trace.json"))).to_dict()


def _below_resolution(d: dict) -> Report:
    """The dataloader-stall builder's report with one item of each kind worth nothing at print resolution:
    a fix-path step that keeps the step time (to = from), a masked finding that costs 0.2 us/step now
    (ms() prints it as "0 us"), an evidence value of 0.0, and an efficiency row of 0 TFLOP/s."""
    path = d["verdict"]["path"]
    last = path[-1]["to_us"]
    path.append({"fix": "pageable-memcpy", "from_us": last, "to_us": last - 10.0, "model": "replay"})  # 10 us off
    # a ms-rounded step: last is ~19.1 ms, so last - 10 us prints the same "19.1 ms"
    f = d["findings"][1]
    f["masked_by"] = ["dataloader-stall"]
    f["time_lost_per_step_us"] = 0.2
    f["evidence"].append({"label": "overlapped with compute", "value": 0.0, "unit": "ms/step", "window": ""})
    d["efficiency"]["rows"][0]["tflops"] = 0.0
    return Report.from_dict(d)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_items_below_resolution_say_none_in_every_format(fmt, tmp_path):
    rep = _below_resolution(_report(build_dataloader_stall(), tmp_path))
    out = RENDERERS[fmt][0](rep)
    assert not re.search(r"(?<![\d.])0 us/step", out), "a masked finding's 0.2 us/step prints as '0 us/step'"
    assert not re.search(r"(?<![\d.])0 ms/step", out)
    assert not re.search(r"(?<![\d.])0 TFLOP/s", out) and "<td class=n>0</td>" not in out
    assert not re.search(r"(\d+\.\d ms) -&?g?t?;?>? ?\1", out.replace("-&gt;", "->")), (
        "a path step that changes nothing"
    )
    assert "none" in out


def test_a_fix_path_step_that_changes_nothing_is_left_out(tmp_path):
    rep = _below_resolution(_report(build_dataloader_stall(), tmp_path))
    text = " ".join(RENDERERS["text"][0](rep).split())
    line = text[text.index("Fix in rank order") : text.index("Measured")]
    # the builder's path: dataloader-stall then pageable-memcpy; the appended no-op step is gone
    assert line.count("pageable-memcpy") == 1 and "dataloader-stall" in line


def test_roofline_calls_per_step_keep_their_digits_and_grammar():
    from traceinspect.detectors.far_from_roofline import _calls

    assert _calls(1.0) == "1 call/step"
    assert _calls(0.4) == "0.4 calls/step"  # an op in some steps only: not "0 calls/step"
    assert _calls(12.0) == "12 calls/step"
