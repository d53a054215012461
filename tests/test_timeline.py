"""Timeline invariants and idle attribution, on builders whose timings are known."""

import numpy as np
import pytest

from builders import TraceBuilder, build_dataloader_stall, build_healthy, build_launch_bound
from traceinspect import load_trace
from traceinspect.trace.timeline import PARTS


def _load(builder, tmp_path):
    return load_trace(builder.write(tmp_path / "t.json"))


@pytest.mark.parametrize("make", [build_healthy, build_dataloader_stall, build_launch_bound])
def test_parts_sum_to_step_time_and_busy_plus_idle_is_window(make, tmp_path):
    tr = _load(make(), tmp_path)
    per = tr.timeline.per_step
    parts = per[[f"{p}_us" for p in PARTS]].sum(axis=1)
    assert np.allclose(parts, per["dur_us"], atol=1e-6)
    busy = per[["compute_us", "comm_us", "memcpy_us"]].sum(axis=1)
    idle = per[[c for c in per.columns if c.startswith("idle_")]].sum(axis=1)
    assert np.allclose(busy + idle, per["dur_us"])


def test_steps_come_from_profiler_step_spans(tmp_path):
    tr = _load(build_healthy(steps=5), tmp_path)
    assert tr.step_source == "ProfilerStep"
    assert tr.steps["step"].tolist() == [10, 11, 12, 13, 14]


def test_dataloader_wait_is_attributed_to_the_dataloader(tmp_path):
    # each step: the host syncs at its end, so the GPU is drained when __next__ starts and
    # stays idle for the whole 30 ms load (+ the 5 us runtime call of the next copy)
    tr = _load(build_dataloader_stall(steps=3, load_us=30_000), tmp_path)
    per = tr.timeline.per_step
    assert per["idle_dataloader_us"].tolist() == pytest.approx([30_000] * 3, rel=0.01)


def test_launch_gaps_are_attributed_to_launch(tmp_path):
    # 400 kernels of 3 us, each behind 20 us of op time + 5 us launch: the GPU waits ~22 us per kernel
    tr = _load(build_launch_bound(steps=2, kernels_per_step=400), tmp_path)
    per = tr.timeline.per_step
    assert (per["idle_launch_us"] / per["dur_us"]).min() > 0.8
    assert per["compute_us"].sum() == pytest.approx(2 * 400 * 3.0)


def test_long_cpu_gap_is_other_cpu_work(tmp_path):
    t = TraceBuilder()
    with t.step():
        t.op("aten::add", kernels=[("k1", 50.0)])
        t.cpu(5_000)  # e.g. CPU-side logging, no launches
        t.op("aten::add", kernels=[("k2", 50.0)])
    tr = _load(t, tmp_path)
    # k1 ends 2 us (launch latency) + 50 us after its 5 us launch call returned; the host then spends
    # 5000 us of CPU work, 10 us in op2 and 5 us launching, and k2 starts 2 us later:
    # idle = 5000 + 10 + 5 + 2 - (2 + 50) = 4965 us
    assert tr.timeline.total("idle_cpu") == pytest.approx(4965.0)


def test_gap_after_sync_is_sync(tmp_path):
    t = TraceBuilder()
    with t.step():
        t.op("aten::mm", kernels=[("k1", 2_000.0)])
        t.item()  # waits for k1 to finish; the GPU is drained when it returns
        t.op("aten::add", kernels=[("k2", 50.0)], cpu_us=10)
    tr = _load(t, tmp_path)
    assert tr.timeline.total("idle_sync") > 0
    assert tr.timeline.total("idle_cpu") == 0


def test_step_selection(tmp_path):
    tr = _load(build_healthy(steps=5), tmp_path)
    tr.select_steps("1:")
    assert tr.steps["step"].tolist() == [11, 12, 13, 14]
    assert len(tr.timeline.per_step) == 4
