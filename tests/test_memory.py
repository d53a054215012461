"""Device memory per step, headroom and the batch-size fit (trace/memory.py, facts/memory_fit.py).

Expected numbers are derived from the builders' inputs in comments; nothing is read off a real trace."""

from __future__ import annotations

import json

import pytest

from builders import build_healthy
from builders_memory import GiB, MemoryTraceBuilder, build_launch_bound_memory
from builders_transfer import build_cpu_offload
from traceinspect.analyze import analyze
from traceinspect.facts.memory_fit import SAFETY_MARGIN, fit_batch, predicted_peak
from traceinspect.render import RENDERERS
from traceinspect.report import Report
from traceinspect.trace.memory import memory_profile
from traceinspect.trace.model import load_trace

H100_BYTES = 85_000_000_000  # builders.DEVICE_PROPS["H100"]["totalGlobalMem"]


def _render(fmt, rep) -> str:
    return RENDERERS[fmt][0](rep, width=100, color=False)


def _load(builder, tmp_path, name="t.json"):
    return load_trace(builder.write(tmp_path / name))


def test_peaks_start_and_headroom_per_step(tmp_path):
    fixed, act = 60e9, 4e9
    tr = _load(build_launch_bound_memory(steps=3, fixed_bytes=fixed, act_bytes=act), tmp_path)
    prof = memory_profile(tr)
    assert prof.source == "trace" and prof.devices == [0]
    rows = prof.device_steps(0)
    assert [r.step for r in rows] == [10, 11, 12]  # TraceBuilder numbers steps from 10
    for r in rows:
        # every step starts with the fixed state and piles all 4 activation chunks before freeing them
        assert r.start_allocated_bytes == pytest.approx(fixed)
        assert r.peak_allocated_bytes == pytest.approx(fixed + act)
        assert r.peak_reserved_bytes == pytest.approx(fixed + act + 1e9)  # reserved_extra = 1 GB
        assert r.rise_bytes == pytest.approx(act)
    # headroom: capacity minus the peak reserved
    assert prof.headroom(0) == pytest.approx(H100_BYTES - (fixed + act + 1e9))
    assert prof.capacity_bytes[0] == H100_BYTES


def test_host_allocations_are_not_device_memory(tmp_path):
    t = MemoryTraceBuilder(fixed_bytes=GiB)
    t.meta["profile_memory"] = 1
    with t.step():
        t.mem(512 * 1024 * 1024, device_type=0)  # a 512 MiB CPU tensor
        t.mem(GiB)
        t.op("aten::add", kernels=[("k", 50.0)])
    prof = memory_profile(_load(t, tmp_path))
    assert prof.peak(0) == pytest.approx(2 * GiB)  # fixed 1 GiB + 1 GiB on the device; the CPU one ignored


def test_two_devices_are_kept_apart(tmp_path):
    t = MemoryTraceBuilder(fixed_bytes=0)
    t.meta["profile_memory"] = 1
    with t.step():
        t.mem(3 * GiB, device=0)
        t.mem(-3 * GiB, device=0)
        t.mem(5 * GiB, device=1)  # the builder's running total is shared: device 1 peaks at 5 GiB
        t.op("aten::add", kernels=[("k", 50.0)])
    prof = memory_profile(_load(t, tmp_path))
    assert prof.devices == [0, 1]
    assert prof.peak(0) == pytest.approx(3 * GiB) and prof.peak(1) == pytest.approx(5 * GiB)


def test_no_profile_memory_says_why_and_how(tmp_path):
    rep = analyze(_load(build_healthy(), tmp_path))
    mem = rep.memory
    assert mem.source == ""
    assert "profile_memory=True" in mem.reason and "profile_memory=True" in mem.hint
    assert mem.to_dict()["devices"] == [{"device": 0, "capacity_bytes": H100_BYTES}]
    for fmt in ("text", "md", "html", "json"):
        assert "profile_memory" in _render(fmt, rep).replace("\\_", "_")  # Markdown escapes the underscore


def test_fit_batch_arithmetic():
    # fixed 60 GB, peak 64 GB at batch 1: 4 GB of activations per sample
    # budget = 0.9 * 85 GB - 60 GB = 16.5 GB -> 4.125x fits; want 8x -> 4x; accumulation 16 -> 4
    fit = fit_batch(peak_bytes=64e9, fixed_bytes=60e9, capacity_bytes=85e9, want_factor=8, batch=1, accumulation=16)
    assert SAFETY_MARGIN == 0.9
    assert fit.max_factor == pytest.approx((0.9 * 85e9 - 60e9) / 4e9, abs=1e-3)
    assert (fit.factor, fit.batch, fit.accumulation) == (4, 4, 4)
    assert fit.predicted_peak_bytes == pytest.approx(60e9 + 4 * 4e9) == predicted_peak(60e9, 4e9, 4)
    assert fit.predicted_peak_bytes <= 0.9 * 85e9
    # accumulation 6: 4 does not divide it, 3 does -> 3 x 2 keeps the effective batch of 6
    fit = fit_batch(peak_bytes=64e9, fixed_bytes=60e9, capacity_bytes=85e9, want_factor=8, batch=1, accumulation=6)
    assert (fit.batch, fit.accumulation) == (3, 2)
    # already over the margin: no growth
    fit = fit_batch(peak_bytes=80e9, fixed_bytes=60e9, capacity_bytes=85e9, want_factor=8, batch=2, accumulation=8)
    assert fit.factor == 1 and fit.max_factor < 1


def test_launch_bound_fix_is_sized_by_memory(tmp_path):
    tr = _load(build_launch_bound_memory(fixed_bytes=60e9, act_bytes=4e9, batch=1, accumulation=16), tmp_path)
    rep = analyze(tr)
    f = next(f for f in rep.findings if f.name == "launch-bound")
    # same derivation as test_fit_batch_arithmetic: 4x fits (8x would peak at 92 GB > 76.5 GB)
    assert "per_device_train_batch_size 1 x gradient_accumulation_steps 16 -> 4 x 4" in f.fix
    assert "same effective batch of 16" in f.fix
    fit = rep.memory["batch_fit"]
    # the report's section and the fix use the same sizing: the report asks for up to 8x, 4x fits
    assert (fit["batch"], fit["accumulation"]) == (4, 4)
    assert fit["current_batch"] == 1 and fit["current_accumulation"] == 16
    text = " ".join(_render("text", rep).split())  # the row wraps at 100 columns
    assert "per_device_train_batch_size 1 -> 4, gradient_accumulation_steps 16 -> 4" in text
    assert "recommended by launch-bound" in text
    assert any("[memory] events" in m for m in fit["measured"])
    assert any("linearly" in a for a in fit["assumed"])


def test_launch_bound_with_plenty_of_memory_takes_the_replayed_knee(tmp_path):
    # 2 GB fixed + 1 GB of activations: (76.5 - 2) / 1 = 74x fits. 1.5 us kernels (fixed part 0.75 us, half
    # the kernel; the grid fills the GPU) every 25 us of host: per original batch at k x a kernel slot is
    # max(25 / k, 0.75 / k + 0.75) us, so each doubling halves the step up to 32x (0.78 us), 64x gives
    # 0.76 us (-2.3%, under 5%): the knee is 32x, and 16 is the largest growth that divides the
    # accumulation of 16 (same effective batch)
    tr = _load(build_launch_bound_memory(fixed_bytes=2e9, act_bytes=1e9, kernel_us=1.5), tmp_path)
    rep = analyze(tr)
    f = next(f for f in rep.findings if f.name == "launch-bound")
    assert "1 x gradient_accumulation_steps 16 -> 16 x 1" in f.fix
    rec = next(e for e in f.evidence if e.label.startswith("batch factor recommended"))
    assert rec.value == 16 and "doubling past 32x gains under 5%" in rec.label
    # one number: the memory section shows the same sizing
    assert (rep.memory["batch_fit"]["batch"], rep.memory["batch_fit"]["accumulation"]) == (16, 1)


def test_launch_bound_full_memory_recommends_graphs_only(tmp_path):
    # 70 GB fixed + 6 GB of activations = 76 GB: 2x would peak at 82 GB > 76.5 GB
    tr = _load(build_launch_bound_memory(fixed_bytes=70e9, act_bytes=6e9), tmp_path)
    f = next(f for f in analyze(tr).findings if f.name == "launch-bound")
    assert f.fix.startswith("The batch cannot grow") and "CUDA graphs" in f.fix


def test_memory_section_in_every_format_and_json(tmp_path):
    rep = analyze(_load(build_launch_bound_memory(), tmp_path))
    d = json.loads(_render("json", rep))
    dev = d["memory"]["devices"][0]
    assert dev["peak_allocated_bytes"] == pytest.approx(64e9)
    assert dev["headroom_bytes"] == pytest.approx(85e9 - 65e9)
    text = _render("text", rep)
    md = _render("md", rep)
    html = _render("html", rep)
    for out in (text, md, html):
        assert "64.00 GB" in out and "20.00 GB" in out  # peak allocated, headroom


def test_saved_report_without_memory_still_loads(tmp_path):
    d = analyze(_load(build_healthy(), tmp_path)).to_dict()
    d.pop("memory", None)
    rep = Report.from_dict(d)
    assert not rep.memory
    assert "memory" not in rep.to_dict()
    d["memory"] = None  # null reads as absent, as a missing key does
    assert not Report.from_dict(d).memory
    d["memory"] = "not an object"  # anything else that is not the section is refused, not dropped
    with pytest.raises(ValueError, match=r"\$\.memory"):
        Report.from_dict(d)


def test_poisoned_memory_section_renders_inert(tmp_path):
    """Hostile text where the memory section holds text renders inert; a wrong type (markup for a
    device id or a byte count) is refused on read, naming the key."""
    d = analyze(_load(build_launch_bound_memory(), tmp_path)).to_dict()
    evil = "<script>x</script>|`"
    for key, value in (("device", evil), ("peak_allocated_bytes", "<b>big</b>")):
        bad = json.loads(json.dumps(d))
        bad["memory"]["devices"][0][key] = value
        with pytest.raises(ValueError, match=rf"\$\.memory\.devices\[0\]\.{key}"):
            Report.from_dict(bad)
    d["memory"]["reason"] = d["memory"]["hint"] = evil
    d["memory"]["batch_fit"]["measured"] = [evil]
    d["memory"]["batch_fit"]["batch_name"] = "<b>big</b>"
    rep = Report.from_dict(d)
    html = _render("html", rep)
    assert "<script>x" not in html and "<b>big" not in html and "&lt;b&gt;big" in html
    md = _render("md", rep)
    assert "<script>" not in md


def test_cpu_offload_without_run_config_estimates_the_state_from_the_gradients(tmp_path):
    f = next(f for f in analyze(_load(build_cpu_offload(), tmp_path)).findings if f.name == "cpu-offload")
    labels = {e.label: e.value for e in f.evidence}
    # no run config: 16 x 64 MiB of gradients leave the GPU per step, at 2 B/parameter (bf16) -> 512 Mi
    # parameters; mixed-precision Adam at 16 B/parameter = 8.6 GB, under 90% of the H100's 85 GB
    n = 16 * 64 * 2**20 / 2
    assert labels[next(k for k in labels if k.startswith("parameters (from the device-to-host"))] == pytest.approx(
        round(n / 1e6, 1)
    )
    assert labels[next(k for k in labels if k.startswith("training state"))] == pytest.approx(round(n * 16 / 1e9, 1))
    assert "the state would fit as it is (8.6 GB of 85 GB" in f.fix and "check the parameter count" in f.fix


def _offload_with_params(n_params: int):
    t = build_cpu_offload()
    t.meta["traceinspect"] = {
        "schema_version": 1,
        "source": "hf_trainer",
        "framework": {},
        "config": {"num_parameters": n_params},
        "steps": [],
    }
    return t


def test_cpu_offload_names_the_smallest_change_that_fits(tmp_path):
    # 7e9 parameters on 85 GB (budget 0.9 x 85 = 76.5 GB): mixed-precision Adam 16 B -> 112 GB (no),
    # bf16 states 8 B -> 56 GB (fits): the smallest change is bf16 states
    f = next(
        f for f in analyze(_load(_offload_with_params(7_000_000_000), tmp_path)).findings if f.name == "cpu-offload"
    )
    labels = {e.label: e.value for e in f.evidence}
    assert labels[next(k for k in labels if k.startswith("as now, without offload"))] == 112.0
    assert labels[next(k for k in labels if k.startswith("with bf16 states"))] == 56.0
    assert labels[next(k for k in labels if k.startswith("with 8-bit Adam states"))] == 70.0  # 10 B
    # QLoRA: 0.5 B (4-bit base) + 1% of parameters x 16 B = 0.66 B/parameter -> 4.62 GB
    assert labels[next(k for k in labels if k.startswith("QLoRA"))] == pytest.approx(4.6)
    # sharded: ceil(112 / 76.5) = 2 GPUs; one GPU of at least 112 / 0.9 = 124 GB
    assert labels[next(k for k in labels if k.startswith("GPUs of 85 GB"))] == 2
    assert labels["smallest single GPU that holds the current state without offload"] == 124
    assert "Smallest change that fits: with bf16 states (~56.0 GB of 85 GB" in f.fix


def test_cpu_offload_when_nothing_fits_says_how_much_memory(tmp_path):
    # 200e9 parameters: QLoRA alone is 0.66 x 200e9 = 132 GB > 76.5 GB; sharded over ceil(3200 / 76.5) = 42
    f = next(
        f for f in analyze(_load(_offload_with_params(200_000_000_000), tmp_path)).findings if f.name == "cpu-offload"
    )
    assert "shard over 42 such GPUs" in f.fix


def test_capture_figures_are_preferred_to_the_events(tmp_path):
    # [memory] events say 60 + 4 GB; the capture helper saw 62 GB at step start and 70 GB at the peak
    # (allocations outside the profiled ops): the analyzer takes the helper's numbers
    t = build_launch_bound_memory(fixed_bytes=60e9, act_bytes=4e9)
    t.meta["traceinspect"]["memory"] = {
        "device_index": 0,
        "device_total_bytes": 80e9,
        "reason": None,
        "steps": [
            {"step": s, "start_allocated_bytes": 62e9, "max_allocated_bytes": 70e9, "max_reserved_bytes": 72e9}
            for s in (10, 11, 12)
        ],
    }
    rep = analyze(_load(t, tmp_path))
    dev = rep.memory["devices"][0]
    assert rep.memory["source"] == "capture"
    assert dev["capacity_bytes"] == 80e9  # torch's total_memory wins over deviceProperties
    assert dev["peak_allocated_bytes"] == 70e9 and dev["headroom_bytes"] == 80e9 - 72e9
    # fit: (0.9 x 80 - 62) / (70 - 62) = 1.25x: not even 2x fits
    assert rep.memory["batch_fit"]["max_factor"] == pytest.approx(1.25)
    f = next(f for f in rep.findings if f.name == "launch-bound")
    assert f.fix.startswith("The batch cannot grow")


def test_malformed_capture_memory_is_ignored(tmp_path):
    t = build_launch_bound_memory(fixed_bytes=60e9, act_bytes=4e9)
    t.meta["traceinspect"]["memory"] = {
        "device_index": "0; rm -rf",
        "device_total_bytes": "huge",
        "steps": [
            {"step": True, "max_allocated_bytes": 1},
            "x",
            {"step": 10, "max_allocated_bytes": 1e300},
            {"step": 11, "max_allocated_bytes": -5},
        ],
    }
    rep = analyze(_load(t, tmp_path))
    assert rep.memory["source"] == "trace"  # back to the [memory] events
    assert rep.memory["devices"][0]["peak_allocated_bytes"] == pytest.approx(64e9)


def test_cpu_capture_records_null_memory_and_the_report_says_why(tmp_path):
    torch = pytest.importorskip("torch")
    from traceinspect.capture import profile_steps
    from traceinspect.capture.meta import NO_CUDA_MEMORY

    lin = torch.nn.Linear(8, 8)
    with profile_steps(tmp_path, wait=0, warmup=1, active=2, model=lin, device=torch.device("cpu")) as cap:
        for _ in range(cap.steps_needed):
            lin(torch.randn(2, 8)).sum().backward()
            cap.step()
    m = cap.metadata["memory"]
    assert m["device_index"] is None and m["device_total_bytes"] is None and m["reason"] == NO_CUDA_MEMORY
    assert [s["step"] for s in m["steps"]] == [1, 2]  # warmup step 0 is not recorded
    assert all(s["max_allocated_bytes"] is None and s["max_reserved_bytes"] is None for s in m["steps"])
    rep = analyze(load_trace(cap.trace_path))
    assert rep.memory["source"] == "" and NO_CUDA_MEMORY in rep.memory["reason"]
    assert "no CUDA device" in _render("text", rep)


# The real traces captured with profile_memory=True whose [memory] events carry allocator totals
# (Kineto >= PyTorch 1.10). Their figures are checked against an independent reading of the raw JSON.
REAL_MEMORY_TRACES = [
    "AMD-AGI__TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "AMD-AGI__TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "AMD-AGI__TraceLens/tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz",
]


def _raw_peaks(path):
    """Per (device, step): max 'Total Allocated' / 'Total Reserved' of the device [memory] events inside the
    CPU ProfilerStep#N span, read with nothing but gzip and json."""
    import gzip

    doc = json.loads(gzip.open(path).read())
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = {}
    for e in ev:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", "cpu_op"):
            n = int(e["name"].split("#")[1])
            steps[n] = max(steps.get(n, (0, 0)), (e["ts"], e["ts"] + e["dur"]), key=lambda s: s[1] - s[0])
    out = {}
    for e in ev:
        a = e.get("args") or {}
        if e.get("name") != "[memory]" or a.get("Device Type", 0) == 0:
            continue
        for n, (lo, hi) in steps.items():
            if lo <= e["ts"] <= hi:
                k = (a.get("Device Id"), n)
                al, re_ = out.get(k, (0, 0))
                out[k] = (max(al, a.get("Total Allocated", 0)), max(re_, a.get("Total Reserved", 0)))
    caps = {d["id"]: d["totalGlobalMem"] for d in doc.get("deviceProperties", [])} if isinstance(doc, dict) else {}
    return out, caps


@pytest.mark.parametrize("rel", REAL_MEMORY_TRACES)
def test_real_trace_peaks_match_the_raw_events(shared_dir, rel):
    path = shared_dir / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in this copy of the shared traces")
    raw, caps = _raw_peaks(path)
    rep = analyze(load_trace(path))
    assert rep.memory["source"] == "trace"
    seen = set()
    for dev in rep.memory["devices"]:
        assert dev["capacity_bytes"] == caps[dev["device"]]
        for row in dev["per_step"]:
            al, res = raw[(dev["device"], row["step"])]
            # the reader also counts the allocation held when the step began, which can only raise the peak
            assert row["peak_allocated_bytes"] >= al and row["peak_allocated_bytes"] in (
                al,
                row["start_allocated_bytes"],
            )
            assert row["peak_reserved_bytes"] == res
            seen.add((dev["device"], row["step"]))
        assert dev["headroom_bytes"] == caps[dev["device"]] - max(r[1] for k, r in raw.items() if k[0] == dev["device"])
    assert seen == set(raw)


def test_device_events_without_device_id_belong_to_the_traced_gpu(tmp_path):
    # older Kineto wrote no "Device Id": the events go to the GPU the trace's kernels run on (device 0)
    t = build_launch_bound_memory(steps=2, fixed_bytes=10e9, act_bytes=2e9)
    for e in t.events:
        if e.get("name") == "[memory]":
            e["args"].pop("Device Id")
    prof = memory_profile(_load(t, tmp_path))
    assert prof.devices == [0] and prof.peak(0) == pytest.approx(12e9)
