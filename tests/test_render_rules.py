"""Rules every rendered format shares (issue 32): items below the report's resolution say "none" or are
left out; one numbering; the text report fits its width."""

from __future__ import annotations

import json
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
    a fix-path step that keeps the step time (to = from), a finding that costs 0.2 us/step now
    (ms() prints it as "0 us"), an evidence value of 0.0, and an efficiency row of 0 TFLOP/s."""
    path = d["verdict"]["path"]
    last = path[-1]["to_us"]
    path.append({"fix": "pageable-memcpy", "from_us": last, "to_us": last - 10.0, "model": "replay"})  # 10 us off
    # a ms-rounded step: last is ~19.1 ms, so last - 10 us prints the same "19.1 ms"
    f = d["findings"][1]
    f["time_lost_per_step_us"] = 0.2
    f["evidence"].append({"label": "overlapped with compute", "value": 0.0, "unit": "ms/step", "window": ""})
    d["efficiency"]["rows"][0]["tflops"] = 0.0
    return Report.from_dict(d)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_items_below_resolution_say_none_in_every_format(fmt, tmp_path):
    rep = _below_resolution(_report(build_dataloader_stall(), tmp_path))
    out = RENDERERS[fmt][0](rep)
    assert not re.search(r"(?<![\d.])0 us/step", out), "a finding's 0.2 us/step prints as '0 us/step'"
    assert not re.search(r"(?<![\d.])0 ms/step", out)
    assert not re.search(r"(?<![\d.])0 TFLOP/s", out) and "<td class=n>0</td>" not in out
    assert not re.search(r"(\d+\.\d ms) -&?g?t?;?>? ?\1", out.replace("-&gt;", "->")), (
        "a path step that changes nothing"
    )
    assert "none" in out


def test_a_fix_path_step_that_changes_nothing_is_left_out(tmp_path):
    rep = _below_resolution(_report(build_dataloader_stall(), tmp_path))
    text = " ".join(RENDERERS["text"][0](rep).split())
    line = text[text.index("Fix in rank order") : text.index("Fixing")]
    # the builder's path: dataloader-stall then pageable-memcpy; the appended no-op step is gone
    assert line.count("pageable-memcpy") == 1 and "dataloader-stall" in line


def test_roofline_calls_per_step_keep_their_digits_and_grammar():
    from traceinspect.detectors.far_from_roofline import _calls

    assert _calls(1.0) == "1 call/step"
    assert _calls(0.4) == "0.4 calls/step"  # an op in some steps only: not "0 calls/step"
    assert _calls(12.0) == "12 calls/step"


# --- width --------------------------------------------------------------------------------------------

LONG_KERNEL = "void at::native::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(int)"
LONG_FILE = "run_" + "very_long_experiment_name_" * 8 + ".pt.trace.json"  # 226 chars: one token past the width
LONG_DIMS = [[1024 + i, 64] for i in range(14)]  # 14 shapes [1024x64] .. [1037x64]: a list past 100 cols


def _long_names():
    from builders import TraceBuilder
    from builders_roofline import BF16, _big_gemm

    t = TraceBuilder("H100")
    for _ in range(3):
        with t.step(wait_gpu=True):
            for _ in range(4):
                _big_gemm(t)
                t.op(
                    "aten::add",  # elementwise: the roofline models any number of inputs
                    kernels=[(LONG_KERNEL, 900.0)],
                    cpu_us=15,
                    input_dims=LONG_DIMS,
                    input_type=[BF16] * len(LONG_DIMS),
                )
    return t


def test_text_fits_100_columns_with_long_names_and_breaks_only_between_items(tmp_path):
    rep = analyze(load_trace(_long_names().write(tmp_path / LONG_FILE)))
    text = RENDERERS["text"][0](rep)
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= 100, widest
    flat = " ".join(text.split())
    # every shape of the long list is printed whole (the list breaks between items, not inside one)
    shapes = ", ".join(f"[{m}x{k}]" for m, k in LONG_DIMS)
    assert shapes in flat
    # a token longer than the line is cut with an ellipsis, never split over lines or overflowing
    assert LONG_FILE[:80] in flat and LONG_FILE not in flat and "..." in flat
    # cut, not split over lines: each line that shows the name starts it (the header, the environment)
    assert all(LONG_FILE[:80] in ln for ln in text.splitlines() if "experiment" in ln)
    # no hyphenated name split at its hyphen ("host-" / "bound")
    assert not re.search(r"(?m)[a-z]-$", text)


def test_terminal_width_is_capped_at_100(tmp_path):
    rep = analyze(load_trace(_long_names().write(tmp_path / "t.pt.trace.json")))
    assert max(len(ln) for ln in RENDERERS["text"][0](rep, width=160).splitlines()) <= 100


# --- the shared traces (skipped where ../shared/traces is absent) --------------------------------------

from conftest import SHARED, shared_available  # noqa: E402

_EXP = json.loads((SHARED / "EXPECTED.json").read_text()) if shared_available() else {"traces": []}
_shared: dict = {}


def _shared_report(rel: str):
    if rel not in _shared:
        _shared[rel] = analyze(load_trace(SHARED / rel))
    return _shared[rel]


@pytest.mark.skipif(not shared_available(), reason="../shared/traces is not present")
@pytest.mark.parametrize("rel", [t["path"] for t in _EXP["traces"]])
def test_shared_text_reports_fit_100_columns(rel):
    text = RENDERERS["text"][0](_shared_report(rel))
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= 100, widest
    assert not re.search(r"(?m)[a-z]-$", text), "a hyphenated name split at its hyphen"


@pytest.mark.skipif(not shared_available(), reason="../shared/traces is not present")
@pytest.mark.parametrize(
    "rel",
    [
        "facebookresearch__param/et_replay/tests/data/linear_kineto.json.gz",  # masked fp32-gemm, 0 us now
        "AMD-AGI__TraceLens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",  # copy_
        "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz",  # host-bound step 25.1 -> 25.1 ms
        "facebookresearch__param/et_replay/tests/data/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json",
    ],
)
def test_shared_reports_print_nothing_below_resolution(rel):
    rep = _shared_report(rel)
    for fmt in ("text", "md", "html"):
        out = RENDERERS[fmt][0](rep).replace("-&gt;", "->")
        assert not re.search(r"(?<![\d.])0 (us|ms)/step", out), fmt
        assert not re.search(r"(?<![\d.])0 TFLOP/s", out), fmt
        assert not re.search(r"(?<![\d.])[01] calls/step", out), fmt
        assert not re.search(r"(\d+(?:\.\d+)? m?s) -> \1 \(", " ".join(out.split())), fmt


# --- one statistic: per-step means against a median step ----------------------------------------------


def _one_slow_step(steps: int = 6, slow_load_us: float = 100_000.0, load_us: float = 2_000.0):
    """The dataloader-stall builder's steps, but only the 4th waits long for its batch (slow_load_us);
    the others wait load_us: the mean stall per step is (slow + 5 * load) / 6 = 18.3 ms, while the
    median step waits only load_us."""
    from builders import TraceBuilder, _healthy_layer

    t = TraceBuilder()
    for i in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(slow_load_us if i == 3 else load_us)
            for _ in range(12):
                _healthy_layer(t)
    return t


def test_verdict_says_the_time_sits_in_one_slow_step(tmp_path):
    rep = analyze(load_trace(_one_slow_step().write(tmp_path / "t.pt.trace.json")))
    v, st = rep.verdict, rep.steps
    assert v.top == "dataloader-stall"
    # the builder's steps are ProfilerStep#10..#15; the 4th (#13) is the slow one
    assert "1 slow step (#13, each over 1.5x the median) holds" in v.headline
    share = max(s.dur_us for s in st.per_step) / (st.count * st.mean_us)  # the slow step's share of the window
    assert f"holds {100 * share:.0f}% of the window" in v.headline
    assert (
        f"mean step {st.mean_us / 1e3:.1f} ms" in v.headline
        and f"median step is {st.median_us / 1e3:.1f} ms" in v.headline
    )
    text = " ".join(RENDERERS["text"][0](rep).split())
    assert f"median step now: {st.median_us / 1e3:.1f} ms" in text


def test_even_steps_need_no_note(tmp_path):
    from builders import build_dataloader_stall

    rep = analyze(load_trace(build_dataloader_stall().write(tmp_path / "t.pt.trace.json")))
    assert rep.verdict.top == "dataloader-stall" and "slow step" not in rep.verdict.headline


@pytest.mark.skipif(not shared_available(), reason="../shared/traces is not present")
def test_resnet_kineto_verdict_names_its_slow_steps():
    rep = _shared_report("facebookresearch__param/et_replay/tests/data/resnet_kineto.json.gz")
    st = rep.steps
    durs = [s.dur_us for s in st.per_step]
    slow = [d for d in durs if d > 1.5 * st.median_us]
    assert st.mean_us > 1.1 * st.median_us and slow  # the mean step is far above the median
    assert f"{len(slow)} slow steps" in rep.verdict.headline
    assert f"hold {100 * sum(slow) / sum(durs):.0f}% of the window" in rep.verdict.headline


def test_whatif_text_fits_100_columns(tmp_path):
    """`traceinspect whatif`'s text follows the width rule of the report: its speed-of-light and note
    lines were printed whole (up to 276 columns on the builders)."""
    from builders import build_healthy
    from traceinspect import api
    from traceinspect.render.text import render_whatif

    path = build_healthy().write(tmp_path / "t.json")
    out = render_whatif(api.whatif(str(path), "launch-bound:batch"))
    assert "Speed of light" in out
    assert max(len(line) for line in out.splitlines()) <= 100, max(out.splitlines(), key=len)
