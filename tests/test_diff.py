"""diff(before, after): step time with noise, findings resolved/new/persisting, unfair comparisons, the CLI."""

import re
import json
import math

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall, build_healthy
from traceinspect.analyze import analyze
from traceinspect.api import analyze as analyze_path
from traceinspect.cli import cli
from traceinspect.diff import MEDIAN_SE_FACTOR, diff, load_saved_report
from traceinspect.errors import TraceError
from traceinspect.findings import Finding, Skipped
from traceinspect.render.diff import DIFF_RENDERERS
from traceinspect.sections import NO_GPU
from traceinspect.report import StepRow, Steps, TraceInfo, Report
from traceinspect.trace.model import load_trace


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    return r.exit_code, r.output


def rep_of(builder, tmp_path, name):
    return analyze(load_trace(builder.write(tmp_path / f"{name}.pt.trace.json")))


TRACE = dict.fromkeys(TraceInfo.required) | dict(
    file="x", rank=0, profiler={}, versions={}, window="", has_gpu=True, has_cpu=True
)


def synthetic(durs_ms, findings=(), gpu="NVIDIA H100 80GB HBM3", skipped=()) -> Report:
    """A Report with just the steps (and findings) diff reads."""
    d = np.array(durs_ms, dtype=float) * 1e3
    return Report(
        trace=TraceInfo(**dict(TRACE, gpu=msgspec.structs.replace(NO_GPU, name=gpu))),
        steps=Steps(
            count=len(d),
            source="ProfilerStep",
            median_us=float(np.median(d)),
            mean_us=float(np.mean(d)),
            min_us=float(d.min()),
            max_us=float(d.max()),
            std_us=float(np.std(d)),
            window_us=float(d.sum()),
            per_step=[StepRow(step=i, start_us=0.0, dur_us=float(x)) for i, x in enumerate(d)],
        ),
        breakdown={},
        findings=list(findings),
        skipped=list(skipped),
    )


def finding(name, per_step_us, code="TI999"):
    return Finding(code=code, name=name, title=name, time_lost_us=4 * per_step_us, time_lost_per_step_us=per_step_us)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pair")
    return rep_of(build_dataloader_stall(), tmp, "stall"), rep_of(build_healthy(), tmp, "healthy")


def test_fixing_the_dataloader_resolves_the_stall(pair):
    before, after = pair
    d = diff(before, after)
    assert "dataloader-stall" in d.resolved and "dataloader-stall" not in d.new
    med_b = np.median([r["dur_us"] for r in before.steps["per_step"]])
    med_a = np.median([r["dur_us"] for r in after.steps["per_step"]])
    assert (d.step_time_us.before, d.step_time_us.after) == (pytest.approx(med_b), pytest.approx(med_a))
    assert d.speedup == pytest.approx(med_b / med_a) and d.speedup > 1
    dl = next(r for r in d.breakdown if r["part"] == "idle_dataloader")
    assert dl["delta_us"] < -20_000  # the builder's 30 ms per-step load is (mostly) idle before, gone after


def test_the_reverse_is_a_new_finding(pair):
    before, after = pair
    d = diff(after, before)
    assert "dataloader-stall" in d.new and "dataloader-stall" not in d.resolved


def test_persisting_findings_carry_their_change():
    d = diff(
        synthetic([100] * 4, [finding("launch-bound", 30_000)]), synthetic([80] * 4, [finding("launch-bound", 10_000)])
    )
    (p,) = d.persisting
    assert p["name"] == "launch-bound"
    assert (p["time_lost_us_before"], p["time_lost_us_after"]) == (120_000, 40_000)  # 4 steps x per-step loss
    assert p["change_per_step_us"] == -20_000


def test_a_finding_skipped_on_the_other_side_is_not_resolved():
    d = diff(
        synthetic([100] * 4, [finding("launch-bound", 30_000)]),
        synthetic([80] * 4, skipped=[Skipped(code="TI999", name="launch-bound", reason="no CPU events")]),
    )
    assert d.resolved == [] and d.unchecked[0]["name"] == "launch-bound"


def test_json_has_the_documented_keys(pair):
    d = json.loads(DIFF_RENDERERS["json"][0](diff(*pair)))
    assert set(d["step_time_us"]) == {"before", "after"}
    for k in ("speedup", "resolved", "new", "persisting", "breakdown", "kernels", "environment"):
        assert k in d


def test_every_format_renders(pair):
    d = diff(*pair)
    for fmt, (render, _) in DIFF_RENDERERS.items():
        out = render(d)
        assert "dataloader-stall" in out, fmt
    assert DIFF_RENDERERS["html"][0](d).startswith("<!DOCTYPE html>")


def test_different_gpus_are_called_out(tmp_path):
    d = diff(rep_of(build_healthy(gpu="A100"), tmp_path, "a"), rep_of(build_healthy(), tmp_path, "h"))
    gpu = next(e for e in d.environment if e["field"] == "GPU")
    assert gpu["before"] == "NVIDIA A100-SXM4-80GB" and gpu["after"] == "NVIDIA H100 80GB HBM3"


# --- the regression gate ------------------------------------------------------------------------------

TIGHT_B = [100, 101, 99, 100]  # median 100 ms, std 0.816 ms
TIGHT_A = [110, 111, 109, 110]  # median 110 ms: +10%


def test_noise_is_two_combined_standard_errors_of_the_medians():
    d = diff(synthetic(TIGHT_B), synthetic(TIGHT_A))
    se = MEDIAN_SE_FACTOR * np.std(TIGHT_B, ddof=1) * 1e3 / math.sqrt(4)  # same spread on both sides
    assert d.noise_us == pytest.approx(2 * math.hypot(se, se))
    assert d.significant is True


def test_regression_beyond_threshold_and_noise_fails():
    gate = diff(synthetic(TIGHT_B), synthetic(TIGHT_A)).regression(5)
    assert gate.regressed and "REGRESSION" in gate.message and "noise" in gate.message


def test_regression_below_threshold_passes():
    assert not diff(synthetic(TIGHT_B), synthetic(TIGHT_A)).regression(15).regressed


def test_regression_within_noise_passes_and_says_so():
    # after: median 110 ms but a 24.5 ms std -> noise ~31 ms, larger than the 10 ms change
    gate = diff(synthetic(TIGHT_B), synthetic([80, 140, 110, 110])).regression(5)
    assert not gate.regressed and "within step-to-step noise" in gate.message


def test_regression_with_one_step_says_noise_was_not_used():
    gate = diff(synthetic([100]), synthetic([110])).regression(5)
    assert gate.regressed and "fewer than 2 steps" in gate.message


# --- reading each side ----------------------------------------------------------------------------------


def test_saved_reports_and_traces_are_told_apart(tmp_path, pair):
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(pair[0].to_dict()))
    assert load_saved_report(saved).findings[0].name == pair[0].findings[0].name
    assert load_saved_report(build_healthy().write(tmp_path / "t.pt.trace.json")) is None
    assert load_saved_report(build_healthy().write(tmp_path / "t.pt.trace.json.gz")) is None


def test_a_broken_saved_report_names_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "findings": [{"nope": 1}], "breakdown": {}}))
    with pytest.raises(TraceError, match="bad.json") as e:
        load_saved_report(bad)
    assert "traceinspect analyze" in e.value.hint


def test_cli_diff_of_a_report_and_a_trace(tmp_path):
    stall = build_dataloader_stall().write(tmp_path / "stall.pt.trace.json.gz")
    healthy = build_healthy().write(tmp_path / "healthy.pt.trace.json.gz")
    assert run("analyze", stall, "-o", tmp_path / "stall.json")[0] == 0
    code, out = run("diff", tmp_path / "stall.json", healthy, "-f", "json")
    assert code == 0
    assert "dataloader-stall" in json.loads(out)["resolved"]
    assert run("diff", stall, healthy, "-o", tmp_path / "d.html")[0] == 0
    assert (tmp_path / "d.html").read_text().startswith("<!DOCTYPE html>")
    # healthy -> stall is a large, consistent slowdown: the gate fails; the other way it passes
    code, out = run("diff", healthy, stall, "--fail-on-regression", "5")
    assert code == 1 and "REGRESSION" in out
    assert run("diff", stall, healthy, "--fail-on-regression", "5")[0] == 0


def test_cli_diff_missing_file_is_exit_3(tmp_path):
    code, out = run("diff", tmp_path / "nope.json", tmp_path / "nope2.json")
    assert code == 3 and "nope.json" in out


# --- acceptance: the real DataLoader pair ----------------------------------------------------------


def test_real_pair_dataloader_workers(shared_dir, expected):
    for pair in expected.get("pairs", []):
        before = analyze_path(str(shared_dir / pair["before"]), cache=True)
        after = analyze_path(str(shared_dir / pair["after"]), cache=True)
        d = diff(before, after)
        for name in pair["resolved"]:
            assert name in d.resolved
        med_b = float(np.median([r["dur_us"] for r in before.steps["per_step"]]))
        med_a = float(np.median([r["dur_us"] for r in after.steps["per_step"]]))
        assert d.step_time_us["before"] == pytest.approx(med_b)
        assert d.step_time_us["after"] == pytest.approx(med_a)
        assert d.speedup == pytest.approx(med_b / med_a)
        text = DIFF_RENDERERS["text"][0](d)
        assert re.search(r"(?m)^  resolved .* dataloader-stall", text) and f"{d.speedup:.2f}x faster" in text


# --- a saved report is untrusted input: its shape is checked, and every real report passes ---------


@pytest.mark.parametrize("scenario", ["stall", "healthy", "launch_bound", "ranks", "cpu_only"])
def test_every_report_we_write_reads_back_unchanged(tmp_path, scenario):
    """Report.from_dict checks types; a report this version writes must pass it and round-trip exactly."""
    from builders import TraceBuilder, build_launch_bound
    from traceinspect.multirank import analyze_many

    if scenario == "ranks":
        paths = []
        for r in range(2):
            b = build_dataloader_stall(steps=2, load_us=5_000 * (r + 1))
            b.rank, b.world_size = r, 2
            paths.append(str(b.write(tmp_path / f"rank{r}.pt.trace.json")))
        rep = analyze_many(paths, jobs=1)
    elif scenario == "cpu_only":
        t = TraceBuilder()
        for _ in range(3):
            with t.step():
                t.cpu(2_000)
        rep = rep_of(t, tmp_path, "cpu")
    else:
        b = {"stall": build_dataloader_stall, "healthy": build_healthy, "launch_bound": build_launch_bound}[scenario]()
        rep = rep_of(b, tmp_path, scenario)
    saved = json.loads(json.dumps(rep.to_dict()))
    assert json.loads(json.dumps(Report.from_dict(saved).to_dict())) == saved


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d["trace"].update(rank="<b>0</b>"), "$.trace.rank"),
        (lambda d: d["trace"].update(gpu={"name": 7}), "$.trace.gpu.name"),
        (lambda d: d["findings"][0]["evidence"][0].update(value=[1]), "$.findings[0].evidence[0].value"),
        (lambda d: d["findings"][0].update(time_lost_us=True), "$.findings[0].time_lost_us"),
        (lambda d: d["steps"].pop("median_us"), "$.steps"),
        (lambda d: d["verdict"].update(expected_from="all"), "$.verdict.expected_from"),
        (lambda d: d.update(ranks=[{"rank": 0}]), "$.ranks[0]"),
        (lambda d: d["timeline_sample"].update(intervals={"compute": [[0, "x"]]}), "$.timeline_sample.intervals"),
        (lambda d: d.update(warnings=[1]), "$.warnings[0]"),
    ],
)
def test_a_report_of_the_wrong_shape_says_where(pair, mutate, where):
    d = json.loads(json.dumps(pair[0].to_dict()))
    mutate(d)
    with pytest.raises(ValueError) as e:
        Report.from_dict(d)
    assert where in str(e.value)
