"""Issue 26 item 1: the replay graph takes the dependencies the trace records (`cuda_sync` records:
stream waits on events, event/stream/device synchronization) and infers from timing only what is not
recorded. Each edge kind on a builder where the answer is known by construction, and the cases where
timing inference takes the wrong edge or none while the record gets it right."""

from __future__ import annotations

import numpy as np
import pytest

import builders_edges as be
from builders import GEMM_BF16
from traceinspect.trace.model import load_trace
from traceinspect.whatif.engine import identity
from traceinspect.whatif.graph import build
from traceinspect.whatif.replay import replay


def _graph(b, tmp_path, name="t.json"):
    return build(load_trace(b.write(tmp_path / name)))


def _nodes(g, name):
    return np.flatnonzero(g.g_name.to_numpy() == name)


def test_sync_records_reach_the_table_in_both_readers(tmp_path, monkeypatch):
    from traceinspect.trace import stream

    path = be.build_wait_beside_a_later_op().write(tmp_path / "t.json")
    for native in ("0", "1"):
        if native == "1" and stream._scan is None:
            continue
        monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
        sy = load_trace(path).sync_events
        w = sy[sy["name"].astype(str) == "Stream Wait Event"]
        assert len(w) == be.STEPS
        assert set(w["stream"]) == {8} and set(w["wait_on_stream"]) == {7}
        assert (w["wait_record_corr"] > 0).all() and (w["wait_record_corr"] < w["correlation"]).all()


def test_recorded_stream_wait_beats_the_timing_guess(tmp_path):
    rec = _graph(be.build_wait_beside_a_later_op(), tmp_path, "rec.json")
    old = _graph(be.build_wait_beside_a_later_op(records=False), tmp_path, "old.json")
    d_rec, d_old = _nodes(rec, "elementwise_kernel_d"), _nodes(old, "elementwise_kernel_d")
    a, y = _nodes(rec, GEMM_BF16), _nodes(old, "elementwise_kernel_y")
    # the record names A; timing takes Y, the op of another stream that ended last before D started
    assert (rec.g_xprev[d_rec] == a).all()
    assert (old.g_xprev[d_old] == y).all()
    assert rec.edges.cross_stream_recorded == be.STEPS and rec.edges.cross_stream_inferred == 0
    assert rec.edges.stream_waits_complete
    assert old.edges.cross_stream_recorded == 0 and old.edges.cross_stream_inferred >= be.STEPS
    # both replay the measured run exactly
    for g in (rec, old):
        r = replay(g)
        assert np.allclose(r.g_start, g.g_ts, atol=1e-6)
    # halve A: with the record D follows A (WAIT_LATENCY_US after it); with the guess it stays behind Y
    for g, d in ((rec, d_rec), (old, d_old)):
        g.scale_gpu(np.isin(np.arange(len(g.g_ts)), _nodes(g, GEMM_BF16)), 0.5)
    r_rec, r_old = replay(rec), replay(old)
    a_end = r_rec.g_end[_nodes(rec, GEMM_BF16)]
    assert r_rec.g_start[d_rec] == pytest.approx(a_end + be.WAIT_LATENCY_US, abs=1e-6)
    y_end = r_old.g_end[_nodes(old, "elementwise_kernel_y")]
    assert (r_old.g_start[d_old] >= y_end - 1e-6).all()
    assert (r_old.g_start[d_old] - r_rec.g_start[d_rec] >= 0.5 * be.A_US - 1.0).all()


def test_recorded_wait_holds_where_the_launch_hid_it(tmp_path):
    rec = _graph(be.build_wait_hidden_by_the_launch(), tmp_path, "rec.json")
    old = _graph(be.build_wait_hidden_by_the_launch(records=False), tmp_path, "old.json")
    d_rec, d_old = _nodes(rec, "elementwise_kernel_d"), _nodes(old, "elementwise_kernel_d")
    assert (rec.g_xprev[d_rec] == _nodes(rec, GEMM_BF16)).all()
    assert (old.g_xprev[d_old] == -1).all()  # the launch bound D: timing sees no wait
    # the host work goes: D is launched at once, but it still cannot start before A ends
    for g in (rec, old):
        g.h_gap = np.where(g.h_gap > 1000.0, 0.0, g.h_gap)
    r_rec, r_old = replay(rec), replay(old)
    a_end = r_rec.g_end[_nodes(rec, GEMM_BF16)]
    assert (r_rec.g_start[d_rec] >= a_end - 1e-6).all()
    assert (r_old.g_start[d_old] < r_old.g_end[_nodes(old, GEMM_BF16)] - 100.0).all()  # the guess lets D run early


@pytest.mark.parametrize("kind", ["stream", "event"])
def test_recorded_host_sync_waits_for_the_named_op(tmp_path, kind):
    rec = _graph(be.build_sync_beside_a_later_op(kind), tmp_path, "rec.json")
    old = _graph(be.build_sync_beside_a_later_op(kind, records=False), tmp_path, "old.json")
    call = "cudaStreamSynchronize" if kind == "stream" else "cudaEventSynchronize"
    h_rec, h_old = np.flatnonzero(rec.h_name == call), np.flatnonzero(old.h_name == call)
    assert len(h_rec) == be.STEPS
    assert (rec.h_wait[h_rec] == _nodes(rec, GEMM_BF16)).all()
    assert (old.h_wait[h_old] == _nodes(old, "elementwise_kernel_y")).all()
    assert rec.edges.host_wait_recorded == be.STEPS
    assert rec.h_resid[h_rec] == pytest.approx(be.RETURN_LATENCY_US)
    for g in (rec, old):
        assert np.allclose(replay(g).h_end, g.h_end, atol=1e-6)
        g.scale_gpu(np.isin(np.arange(len(g.g_ts)), _nodes(g, GEMM_BF16)), 0.5)
    r_rec = replay(rec)
    a_end = r_rec.g_end[_nodes(rec, GEMM_BF16)]
    assert r_rec.h_end[h_rec] == pytest.approx(a_end + be.RETURN_LATENCY_US, abs=1e-6)
    r_old = replay(old)
    assert (r_old.h_end[h_old] >= r_old.g_end[_nodes(old, "elementwise_kernel_y")]).all()


def test_event_query_records_no_wait(tmp_path):
    t = be.EdgeTraceBuilder()
    for _ in range(be.STEPS):
        with t.step():
            t.kernel(GEMM_BF16, be.A_US, stream=7)
            ev = t.record_event(7)
            t.event_query(ev)  # returns at once: an "Event Sync" record, but no wait
            t.cpu(2 * be.A_US)
    g = _graph(t, tmp_path)
    q = np.flatnonzero(g.h_name == "cudaEventQuery")
    assert len(q) == be.STEPS and (g.h_wait[q] == -1).all()
    assert g.edges.host_wait_recorded == 0


def test_device_sync_waits_for_the_last_op_enqueued_before_it(tmp_path):
    t = be.EdgeTraceBuilder()
    for _ in range(be.STEPS):
        with t.step():
            t.kernel(GEMM_BF16, be.A_US, stream=7)
            t.kernel("elementwise_kernel_y", 2 * be.A_US, stream=9)
            t.device_synchronize()
    g = _graph(t, tmp_path)
    h = np.flatnonzero(g.h_name == "cudaDeviceSynchronize")
    assert (g.h_wait[h] == _nodes(g, "elementwise_kernel_y")).all()
    assert g.edges.host_wait_recorded == be.STEPS and g.edges.host_wait_inferred == 0


def test_an_unrecorded_wait_call_keeps_the_timing_fallback(tmp_path):
    t = be.build_wait_beside_a_later_op()
    # drop one step's Stream Wait Event record: the trace no longer records every wait
    i = next(k for k, e in enumerate(t.events) if e.get("cat") == "cuda_sync" and e["name"] == "Stream Wait Event")
    del t.events[i]
    g = _graph(t, tmp_path)
    assert not g.edges.stream_waits_complete
    assert g.edges.cross_stream_recorded == be.STEPS - 1
    assert g.edges.cross_stream_inferred == 1  # the unrecorded one, by timing (Y)


def test_a_record_the_times_contradict_is_dropped(tmp_path):
    t = be.build_wait_beside_a_later_op()
    # point the first wait at the record of a later step's event: its op ended after D started
    waits = [e for e in t.events if e.get("cat") == "cuda_sync" and e["name"] == "Stream Wait Event"]
    waits[0]["args"]["wait_on_cuda_event_record_corr_id"] = waits[-1]["args"]["wait_on_cuda_event_record_corr_id"]
    g = _graph(t, tmp_path)
    assert g.edges.contradicted == 1
    assert g.edges.cross_stream_recorded == be.STEPS - 1


def test_identity_reports_the_edge_shares_with_its_error(tmp_path):
    tr = load_trace(be.build_wait_beside_a_later_op().write(tmp_path / "t.json"))
    ident = identity(tr)
    e = ident["edges"]
    g = build(tr)
    assert e["recorded"] == g.edges.recorded and e["inferred"] == g.edges.inferred
    assert e["recorded_share"] == pytest.approx(g.edges.recorded / (g.edges.recorded + g.edges.inferred))
    assert ident["median_error_frac"] == pytest.approx(0.0, abs=1e-9)


def test_a_threads_first_call_follows_the_call_that_handed_off_to_it(tmp_path):
    """The backward thread's first call in the window (DLRM's autograd thread) has no predecessor on its
    thread: it follows the other thread's call that ended last before it, so when that call moves earlier
    it moves too. It was pinned at its measured time, and with it every collective it launched (the
    exposed-communication replay of the DLRM ranks saved 0 ms)."""
    from builders import TraceBuilder

    t = TraceBuilder("H100")
    with t.step(wait_gpu=True):
        t.op("aten::mm", kernels=[(GEMM_BF16, 100.0)], cpu_us=5000.0)
        n = len(t.events)
        t.op("autograd::engine::evaluate_function: MmBackward0", kernels=[(GEMM_BF16, 200.0)], cpu_us=50.0)
        for e in t.events[n:]:
            if e.get("cat") in ("cpu_op", "cuda_runtime"):
                e["tid"] = 99  # the backward thread
    g = _graph(t, tmp_path)
    r0 = replay(g)
    first = int(np.flatnonzero(g.h_tid == 99)[0])
    assert g.h_prev[first] < 0 and g.h_tid[g.h_xprev[first]] != 99
    bwd = int(np.flatnonzero(g.g_launch == first)[0])
    # the main thread's 5 ms of host work before its launch goes
    main_launch = int(g.g_launch[np.flatnonzero(g.g_ts < g.g_ts[bwd])[0]])
    g2 = g.copy()
    g2.h_gap[main_launch] = 0.0
    r1 = replay(g2)
    assert r1.g_start[bwd] == pytest.approx(r0.g_start[bwd] - g.h_gap[main_launch], abs=1.0)


def test_a_wait_is_replayed_after_the_op_it_waits_for(tmp_path):
    """A blocking launch call returns at the very time its own zero-length kernel ends. Its wait must be
    replayed after that kernel: read before it, the wait takes the kernel's measured end, and once the
    DataLoader time goes every later host node keeps its measured time (the step that holds the call
    absorbs all the time saved before it; a real ResNet-50 step read 310 ms instead of 121)."""
    b = be.build_blocking_launch_of_an_empty_kernel()
    g = _graph(b, tmp_path)
    empty = _nodes(g, "elementwise_kernel_empty")
    calls = g.g_launch[empty]
    assert (g.h_wait[calls] == empty).all()  # the graph makes each blocking call wait for its kernel
    r = replay(g)
    assert np.allclose(r.h_end, g.h_end, atol=1e-6) and np.allclose(r.step_us, np.diff(g.h_ts[g.markers]))
    # the DataLoader waits go (every host gap that long): each step is shorter by its wait, every one
    g.h_gap = np.where(g.h_gap >= 0.5 * 3000.0, 0.0, g.h_gap)
    after = replay(g)
    saved = r.step_us - after.step_us
    assert np.allclose(saved, 3000.0, atol=30.0), saved
    assert (after.h_end[calls] < g.h_end[calls] - 2000.0).all()


def test_the_window_starts_where_it_was_measured(tmp_path):
    """A fix that speeds up GPU work before the first analysed step (set-up the host synchronised on)
    leaves the first step's start where it was measured: the window's steps, not the time before them,
    are what a fix shortens."""
    g = _graph(be.build_gpu_work_before_the_window(), tmp_path)
    r = replay(g)
    first = g.markers[0]
    g.scale_gpu(np.ones(len(g.g_ts), dtype=bool), 0.5)  # every GEMM twice as fast, the set-up one too
    after = replay(g)
    assert after.h_start[first] == pytest.approx(g.h_ts[first], abs=1e-6)
    assert (after.step_us <= r.step_us + 1e-6).all()
    assert np.allclose(r.step_us - after.step_us, 250.0, atol=1.0)  # each step's own GEMM: 500 -> 250 us
