"""Trace quality (facts/trace_quality.py, docs/trace-quality.md): each check on the builder that makes
its artifact, and on the real traces where it fires or stays quiet (skipped where ../shared is absent)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

import builders_quality as bq
from builders import build_healthy, build_launch_bound
from conftest import SHARED, shared_available
from traceinspect.api import render
from traceinspect.analyze import analyze
from traceinspect.cli import cli
from traceinspect.report import Report
from traceinspect.trace.model import load_trace

SCHEDULE = "torch.profiler.schedule(wait=1, warmup=1, active=3)"  # the capture advice the brief names


def _report(b, tmp_path, name="t.json"):
    return analyze(load_trace(b.write(tmp_path / name)))


def _check(rep, name):
    return next(c for c in rep.trace_quality.checks if c.check == name)


def test_a_healthy_trace_is_good_and_says_so_on_top_of_the_verdict(tmp_path):
    rep = _report(build_healthy(), tmp_path)
    assert rep.trace_quality.status == "good"
    assert rep.trace_quality.line == "Trace quality: good"
    assert {c.status for c in rep.trace_quality.checks} == {"ok"}
    text = render(rep, "text")
    assert text.index("Trace quality: good") < text.index(rep.verdict.headline[:40])
    assert "Trace quality: good" in text and "### Trace quality: good" in render(rep, "md")
    page = render(rep, "html")
    assert 'id="trace-quality"' in page and re.search(r'id="verdict">\s*<p><b>Trace quality: good</b></p>', page)
    assert rep.to_dict()["trace_quality"]["status"] == "good"


def test_graph_replay_idle_is_named_not_unexplained(tmp_path):
    rep = _report(bq.build_graph_replay(), tmp_path)
    c = _check(rep, "graph-replays")
    assert c.status == "limited"
    assert c.values["graph_launches"] == 3  # one cudaGraphLaunch per step
    assert c.values["graph_kernels"] == 3 * bq.GRAPH_KERNELS
    # per step: 40 graph kernels x 5 us against 2 eager GEMMs x 400 us -> 200 / 1000 of kernel time
    assert c.values["graph_kernel_frac"] == pytest.approx(0.2)
    assert "CUDA-graph replays" in rep.trace_quality.line
    (art,) = rep.account.artifacts
    # inside each replay: 39 gaps of 20 us between its 40 kernels
    assert art.per_step_us == pytest.approx((bq.GRAPH_KERNELS - 1) * bq.GRAPH_GAP_US, rel=1e-6)
    assert art.check == "graph-replays" and "inside graph replays" in art.label
    assert not rep.verdict.headline.startswith("No cause found for"), rep.verdict.headline
    assert "inside graph replays" in rep.verdict.headline
    assert "not unexplained: inside graph replays" in render(rep, "text")


def test_kernels_without_a_launch_call_are_counted(tmp_path):
    rep = _report(bq.build_unlaunched(), tmp_path)
    c = _check(rep, "graph-replays")
    assert c.values["unlaunched_kernels"] == 30  # 10 per step, 3 steps
    assert c.values["unlaunched_kernel_frac"] == pytest.approx(0.5)  # as many as the launched ones, same length
    assert c.status == "poor" and rep.trace_quality.status == "poor"
    assert _check(rep, "missing-activity").values["kernels_without_launch"] == 30


def test_a_queue_wait_for_work_not_in_the_trace_is_named(tmp_path):
    rep = _report(bq.build_queue_wait(), tmp_path)
    c = _check(rep, "missing-activity")
    # the first kernel's launch returns at 1020 us (step at 1000, 15 us of host, 5 us launch) and it starts
    # at 6000 us, when the stream frees: 4980 us of waiting on nothing the trace shows
    assert c.values["queue_wait_us"] == pytest.approx(bq.QUEUE_WAIT_US - 20.0)
    assert c.status == "poor"  # 4.98 ms of a ~6.6 ms window
    assert "work not in the trace" in rep.verdict.headline
    assert not rep.verdict.headline.startswith("No cause found for")


def test_a_first_step_with_dropped_kernels_is_named(tmp_path):
    rep = _report(bq.build_dropped_first_step(), tmp_path)
    c = _check(rep, "missing-activity")
    assert c.status == "limited" and c.steps == [10]  # the builder's first step is ProfilerStep#10
    assert "step 10 has 2 kernels against a median of 10" in c.summary
    assert "median_step_without_first_us" in c.values
    assert _check(rep, "missing-activity").status != "ok"
    quiet = _report(build_healthy(), tmp_path, "h.json")
    assert _check(quiet, "missing-activity").status == "ok"


def test_a_warm_up_step_is_named_with_the_medians_and_the_schedule(tmp_path):
    rep = _report(bq.build_warmup(), tmp_path)
    c = _check(rep, "warm-up")
    assert c.status == "limited" and c.steps == [10]
    assert f"{bq.WARMUP_MALLOCS} allocator call(s)" in c.summary
    d = [s.dur_us for s in rep.steps.per_step]
    assert c.values["median_step_us"] == pytest.approx(sorted(d)[1] / 2 + sorted(d)[2] / 2)
    assert c.values["median_step_without_us"] == pytest.approx(sorted(d[1:])[1])  # median of steps 11-13
    assert SCHEDULE in rep.trace_quality.line
    # a slow step without allocator growth or autotuning is not a warm-up
    assert _check(_report(bq.build_dropped_first_step(), tmp_path, "d.json"), "warm-up").status == "ok"


def test_one_step_has_no_noise_band(tmp_path):
    rep = _report(build_healthy(steps=1), tmp_path)
    c = _check(rep, "too-few-steps")
    assert c.status == "limited" and SCHEDULE in c.short
    assert "cannot measure their error" in c.summary
    assert _check(_report(build_healthy(steps=2), tmp_path, "two.json"), "too-few-steps").status == "ok"


def test_clock_skew_lowers_the_confidence_of_time_claims(tmp_path):
    rep = _report(bq.build_clock_skew(), tmp_path)
    c = _check(rep, "clock-order")
    assert c.values["before_launch"] == 120  # every 5th of 3 x 200 kernels
    assert c.status == "poor"  # 20% of kernels, over CLOCK_POOR_FRAC
    lb = next(f for f in rep.findings if f.name == "launch-bound")
    clean = next(f for f in _report(build_launch_bound(steps=3, kernels_per_step=200), tmp_path, "c.json").findings)
    assert clean.confidence == "high" and lb.confidence == "medium"
    assert any("trace quality" in e.label for e in lb.evidence)


def test_the_section_survives_a_saved_report(tmp_path):
    rep = _report(bq.build_graph_replay(), tmp_path)
    back = Report.from_dict(rep.to_dict())
    assert back.trace_quality == rep.trace_quality and render(back, "text") == render(rep, "text")


def test_strict_exits_4_on_a_poor_trace(tmp_path, monkeypatch):
    poor = bq.build_queue_wait().write(tmp_path / "poor.json")
    good = build_healthy().write(tmp_path / "good.json")
    monkeypatch.chdir(tmp_path)

    def run(*args):
        r = CliRunner().invoke(cli, ["analyze", *map(str, args), "--isolated"] if "--config" not in args else args)
        return r.exit_code, r.output

    assert run(poor)[0] == 0
    code, out = run(poor, "--strict")
    assert code == 4 and "poor.json" in out and "Trace quality: poor" in out
    assert run(good, "--strict")[0] == 0
    cfg = tmp_path / "ti.toml"
    cfg.write_text("strict = true\n")
    r = CliRunner().invoke(cli, ["analyze", str(poor), "--config", str(cfg)])
    assert r.exit_code == 4


# --- the real traces ------------------------------------------------------------------------------

shared = pytest.mark.skipif(not shared_available(), reason="../shared/traces is not present")
INF = "AMD-AGI__TraceLens/tests/traces/inference/"
GRAPH_TRACES = [
    INF + "sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    INF + "vllm_decode_full/graph_execution.json.gz",
    INF + "vllm_prefilldecode_piecewise/graph_execution.json.gz",
]
CLEAN_V100 = [
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]


@shared
@pytest.mark.parametrize("rel", GRAPH_TRACES, ids=lambda r: r.split("/")[-2])
def test_graph_traces_are_graph_replays_not_unexplained(rel):
    rep = analyze(load_trace(SHARED / rel))
    assert _check(rep, "graph-replays").status == "limited"
    assert "HIP-graph replays" in rep.trace_quality.line
    assert not rep.verdict.headline.startswith("No cause found for"), rep.verdict.headline
    assert rep.account.unexplained_frac_of_step < 0.10
    assert "launch-bound" not in [f.name for f in rep.findings]


@shared
def test_sglang_prefill_decode_wait_is_named_not_unexplained():
    """No graph replay here; half of the window the GPU waits behind work queued before the capture."""
    rep = analyze(load_trace(SHARED / INF / "sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"))
    assert _check(rep, "graph-replays").status == "ok"
    assert _check(rep, "missing-activity").status != "ok"
    assert rep.account.unexplained_frac_of_step < 0.10
    assert "work not in the trace" in rep.verdict.headline


@shared
def test_sglang_decode_is_poor_the_wait_is_work_not_in_the_trace():
    rep = analyze(load_trace(SHARED / GRAPH_TRACES[0]))
    assert rep.trace_quality.status == "poor"
    assert _check(rep, "graph-replays").values["graph_kernels"] == 544  # of 555: one hipGraphLaunch's
    assert _check(rep, "missing-activity").values["queue_wait_frac"] > 0.9
    assert "work not in the trace" in rep.verdict.headline


@shared
@pytest.mark.parametrize("rel", CLEAN_V100, ids=lambda r: r.split("/")[-1][:20])
def test_clean_v100_resnet_traces_are_good(rel):
    rep = analyze(load_trace(SHARED / rel))
    assert rep.trace_quality.line == "Trace quality: good", rep.trace_quality.line


@shared
def test_pytorch_1_8_capture_lost_the_first_launch_calls():
    """The PyTorch 1.8 era capture holds kernels of its first step whose runtime calls were not recorded
    (their correlation ids are below the first recorded runtime call's): named, not silently judged."""
    rep = analyze(
        load_trace(SHARED / "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    )
    c = _check(rep, "graph-replays")
    assert c.values["unlaunched_kernels"] > 0 and c.values["graph_kernels"] == 0
    assert c.status == "limited"
