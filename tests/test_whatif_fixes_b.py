"""The replay transformations of cpu-offload, pageable-memcpy, exposed-communication and allocator-churn:
each fix replayed on a loop built with the cause lands within a stated tolerance of the same loop built
with the fix (builders_whatif.py), and the speed of light's FLOPs cross-checked against recorded FLOPs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders_whatif import (
    OFFLOAD_OPT_US,
    PAGEABLE_US,
    PINNED_US,
    build_churn,
    build_comm_then_compute,
    build_offload_loop,
    build_pageable_input,
)
from traceinspect.analyze import analyze
from traceinspect.trace.model import load_trace
from traceinspect.whatif import engine as E


def _load(t, tmp_path, name):
    return load_trace(str(t.write(tmp_path / f"{name}.pt.trace.json")))


def _pair(make, tmp_path, fixed_kw):
    return _load(make(), tmp_path, "before"), _load(make(**fixed_kw), tmp_path, "after")


def _predict(before, fix):
    rep = analyze(before)
    assert fix in {f.name for f in rep.findings}, [f.name for f in rep.findings]
    return E.predict(before, rep.findings, (fix,))


def test_cpu_offload_state_on_the_gpu(tmp_path):
    before, after = _pair(build_offload_loop, tmp_path, {"offload": False})
    p = _predict(before, "cpu-offload")
    truth = float(after.steps["dur_us"].median())
    measured = float(before.steps["dur_us"].median())
    # 32 copies of 6.4 ms and 100 ms of CPU Adam leave; a 5.1 ms GPU Adam step comes in: 1% (the host
    # costs of the removed calls differ by a few us)
    assert abs(p.median_us - truth) / truth < 0.01, (p.median_us, truth, measured)
    assert p.median_us < 0.25 * measured
    m = p.models["cpu-offload"]
    assert m.startswith("96 offload copies go")  # 2 x 16 per step, 3 steps
    assert f"{OFFLOAD_OPT_US / 1e3:.2f} ms" in m


def test_pageable_copies_become_pinned_and_async(tmp_path):
    before, after = _pair(build_pageable_input, tmp_path, {"pinned": True})
    p = _predict(before, "pageable-memcpy")
    truth = float(after.steps["dur_us"].median())
    # the host no longer blocks 2 ms; the copy runs at 50 GB/s (400 us) ahead of the kernels queued behind it
    assert abs(p.median_us - truth) / truth < 0.01, (p.median_us, truth)
    assert float(before.steps["dur_us"].median()) - p.median_us > 0.5 * (PAGEABLE_US - PINNED_US)
    assert "host-to-device at 50.0 GB/s" in p.models["pageable-memcpy"]


def test_exposed_communication_overlaps_the_remaining_compute(tmp_path):
    before, after = _pair(build_comm_then_compute, tmp_path, {"overlap": True})
    p = _predict(before, "exposed-communication")
    truth = float(after.steps["dur_us"].median())
    measured = float(before.steps["dur_us"].median())
    # before: 6 + 3 + 5 ms in series; after: the 5 ms of GEMMs under the 3 ms all-reduce: saves 3 ms
    assert measured - truth == pytest.approx(3000.0, abs=50.0)
    assert abs(p.median_us - truth) / truth < 0.01, (p.median_us, truth)
    # per step: the first of the 5 GEMMs stops waiting; the final op keeps its wait (3 steps)
    assert p.models["exposed-communication"].startswith("3 compute op(s) stop waiting")
    assert "3 final wait(s)" in p.models["exposed-communication"]


def test_exposed_communication_keeps_the_final_wait(tmp_path):
    # all-reduce longer than the compute after it: the step still ends after the all-reduce + the final op
    before = _load(build_comm_then_compute(comm_us=8000.0), tmp_path, "before")
    after = _load(build_comm_then_compute(overlap=True, comm_us=8000.0), tmp_path, "after")
    p = _predict(before, "exposed-communication")
    truth = float(after.steps["dur_us"].median())
    assert abs(p.median_us - truth) / truth < 0.01, (p.median_us, truth)


def test_allocator_churn_calls_disappear(tmp_path):
    before, after = _pair(build_churn, tmp_path, {"churn": False})
    p = _predict(before, "allocator-churn")
    truth = after.steps["dur_us"].to_numpy()
    # the first step keeps its (warm-up) calls in both runs; the steady-state steps lose theirs
    np.testing.assert_allclose(p.step_us, truth, rtol=0.01)
    assert float(before.steps["dur_us"].iloc[1:].median()) > 1.1 * float(np.median(truth[1:]))


@pytest.mark.parametrize(
    "make, fix",
    [
        (build_offload_loop, "cpu-offload"),
        (build_pageable_input, "pageable-memcpy"),
        (build_comm_then_compute, "exposed-communication"),
        (build_churn, "allocator-churn"),
    ],
)
def test_fix_is_a_replay_in_the_verdict(make, fix, tmp_path):
    rep = analyze(_load(make(), tmp_path, "x"))
    path = rep.verdict.get("path") or []
    mine = [s for s in path if s["fix"] == fix]
    assert mine and mine[0]["model"] == "replay"


def test_no_finding_changes_nothing(tmp_path):
    tr = _load(build_pageable_input(pinned=True), tmp_path, "x")
    for fix in ("cpu-offload", "pageable-memcpy", "exposed-communication", "allocator-churn"):
        p = E.predict(tr, [], (fix,))
        np.testing.assert_allclose(p.step_us, tr.steps["dur_us"].to_numpy(), rtol=1e-6)


# --- speed of light: the shape model's FLOPs against the profiler's own --------------------------------


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_speed_of_light_cross_checks_recorded_flops(factor, tmp_path):
    from builders_whatif import GEMM_FLOPS, build_gemm_flops

    tr = _load(build_gemm_flops(flops_factor=factor), tmp_path, "x")
    sol = E.speed_of_light(tr)
    # 8 GEMMs per step, each 2*M*N*K by the shape model; the args say factor x that
    assert sol["matrix_flops_per_step"] == pytest.approx(8 * GEMM_FLOPS)
    assert sol["recorded_flops_per_step"] == pytest.approx(8 * int(factor * GEMM_FLOPS))
    assert sol["recorded_vs_model"] == pytest.approx(factor)


def test_no_with_flops_no_cross_check(tmp_path):
    from builders_whatif import build_gemm_flops

    sol = E.speed_of_light(_load(build_gemm_flops(with_flops=False), tmp_path, "x"))
    assert sol["sol_us"] and "recorded_flops_per_step" not in sol and "recorded_vs_model" not in sol


def test_shape_model_flops_match_a_real_profiler_capture(tmp_path):
    """A tiny CPU torch.profiler capture (record_shapes, with_flops): per op family, the FLOPs the shape
    model derives from the recorded shapes equal those the profiler computes for the same ops."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    from traceinspect.trace import roofline as rl

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    conv = torch.nn.Conv2d(3, 8, 3)
    x, im = torch.randn(16, 64), torch.randn(2, 3, 16, 16, requires_grad=True)
    a, b = torch.randn(4, 8, 16), torch.randn(4, 16, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for i in range(2):
            with torch.profiler.record_function(f"ProfilerStep#{i}"):
                mlp(x).sum().backward()
                conv(im).sum().backward()
                torch.bmm(a, b)
    path = tmp_path / "capture.pt.trace.json"
    prof.export_chrome_trace(str(path))
    family = {"aten::addmm": rl.GEMM, "aten::mm": rl.GEMM, "aten::bmm": rl.BMM, "aten::conv2d": rl.CONV}
    theirs: dict = {}
    for e in prof.events():
        if e.name in family and e.flops:
            theirs[family[e.name]] = theirs.get(family[e.name], 0) + e.flops
    assert set(theirs) == {rl.GEMM, rl.BMM, rl.CONV}, theirs
    tr = load_trace(str(path))
    ops = tr.cpu_ops
    names = ops["name"].astype(str).tolist()
    dims = [tr.shapes(d) if d is not None else None for d in ops["input_dims_raw"]]
    types = [tr.shapes(t) if t is not None else None for t in ops["input_type_raw"]]
    conv_geo = rl.conv_geometry(names, dims)
    ours: dict = {}
    for n, d, t in zip(names, dims, types):
        if n in family:
            w = rl.op_work(n, d, t, conv_geo)
            assert w is not None and w.family == family[n], (n, d, t)
            ours[w.family] = ours.get(w.family, 0) + w.flops
    for fam, f in theirs.items():
        assert ours[fam] == pytest.approx(f, rel=1e-9), fam
    # the engine's reader of the `flops` args: the capture says with_flops; where this torch's exporter
    # writes the args (torch 2.13 does not for CPU ops), they must be the profiler's own numbers
    rec = E.recorded_flops(tr)
    assert rec is not None
    if len(rec):
        by_family: dict = {}
        for name, f in zip(rec["name"].astype(str), rec["flops"]):
            if name in family:
                by_family[family[name]] = by_family.get(family[name], 0) + f
        assert by_family == pytest.approx(theirs)


def test_cpu_offload_hardware_limit_says_what_the_fit_would_give(tmp_path):
    t = build_offload_loop()
    n = 20_000_000_000  # 20 B parameters: 320 GB of state at 16 B each, more than the H100's 85 GB
    t.meta["traceinspect"] = {
        "schema_version": 1,
        "source": "hf_trainer",
        "framework": {},
        "config": {"num_parameters": n, "offload_optimizer": "cpu"},
        "steps": [],
    }
    tr = _load(t, tmp_path, "x")
    p = _predict(tr, "cpu-offload")
    m = p.models["cpu-offload"]
    assert "does not fit" in m and "a GPU that holds it" in m
    # the GPU step reads and writes 2 x 16 B per parameter at 3350 GB/s
    assert f"{2 * n * 16 / 3350e3 / 1e3:.2f} ms" in m


def test_offload_builders_replay_sanely(tmp_path):
    """FSDP parameter offload (pinned, on a copy stream, CPU AdamW) and offloaded inference weights
    (parameter streaming, no optimizer): the fix never lengthens a step and removes every offload copy."""
    from builders_transfer import build_fsdp_param_offload, build_weight_offload_inference

    for make in (build_fsdp_param_offload, build_weight_offload_inference):
        tr = _load(make(), tmp_path, make.__name__)
        p = _predict(tr, "cpu-offload")
        base = E.predict(tr, [], ())
        assert (p.step_us <= base.step_us + 1e-6).all(), make.__name__
        assert "offload cop" in p.models["cpu-offload"]


@pytest.mark.parametrize("native", ["0", "1"])
def test_flops_cross_check_when_the_file_is_gone(tmp_path, monkeypatch, native):
    """The `flops` args are read with the tables (cpu_ops.flops): the cross-check needs the file no more
    once it is loaded, from either reader."""
    from builders_whatif import GEMM_FLOPS, build_gemm_flops
    from traceinspect.trace import stream

    if native == "1" and stream._scan is None:
        pytest.skip("the native scanner was not built")
    monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
    path = build_gemm_flops(flops_factor=0.5).write(tmp_path / "x.pt.trace.json")
    tr = load_trace(str(path))
    path.unlink()  # moved away after loading: the cross-check is still there
    sol = E.speed_of_light(tr)
    assert sol["sol_us"]
    assert sol["recorded_flops_per_step"] == pytest.approx(8 * int(0.5 * GEMM_FLOPS))
    assert sol["recorded_vs_model"] == pytest.approx(0.5)


def test_flops_cross_check_counts_only_matrix_ops_inside_the_steps(tmp_path):
    """Only RECORDED_MATRIX_OPS in the analysed steps count; an op without the arg adds nothing, one
    whose arg says 0 adds 0; a `flops` arg on a non-matrix op or outside every step is ignored."""
    from builders_whatif import GEMM_FLOPS, build_gemm_flops

    t = build_gemm_flops(flops_factor=1.0, layers=2, steps=3)
    t.op("aten::mm", args={"flops": 10**15})  # after the last step: not analysed
    doc = t.build()
    ops = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    ops[0]["args"].pop("flops")  # no arg: adds nothing
    ops[1]["args"]["flops"] = 0  # a recorded 0: adds 0
    relu = dict(ops[2], name="aten::relu", args={**ops[2]["args"], "flops": 10**15})
    doc["traceEvents"].append(relu)  # not a matrix op
    path = tmp_path / "x.pt.trace.json"
    path.write_text(json.dumps(doc))
    tr = load_trace(str(path))
    assert int(np.isnan(tr.cpu_ops["flops"]).sum()) >= 1 and (tr.cpu_ops["flops"] == 0).sum() == 1
    sol = E.speed_of_light(tr)
    n_steps = len(tr.steps)
    assert sol["recorded_flops_per_step"] == pytest.approx((3 * 2 - 2) * GEMM_FLOPS / n_steps)
