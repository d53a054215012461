"""The replay loop in C (_scan.replay) against the Python loop it replaces: identical floats and bind codes on
every what-if builder, with and without the fixes applied, on random graphs and on shared traces; malformed
graphs raise ValueError; the memoised event order follows a transformation that changes edges."""

from __future__ import annotations

import numpy as np
import pytest
from builders import build_dataloader_stall, build_healthy, build_launch_bound
from builders_whatif import build_host_bound_fp32, build_item_syncs, build_stall_and_host_bound, build_stream_wait

from traceinspect.analyze import analyze
from traceinspect.trace.model import load_trace
from traceinspect.whatif import engine as E
from traceinspect.whatif import replay as R
from traceinspect.whatif.graph import Graph

_scan = pytest.importorskip("traceinspect.trace._scan")
if not hasattr(_scan, "replay"):
    pytest.skip("the native extension has no replay (rebuild it)", allow_module_level=True)

FIELDS = ("h_start", "h_end", "g_start", "g_end", "h_bind", "h_end_bind", "g_bind", "step_us")
BUILDERS = [
    build_healthy,
    build_dataloader_stall,
    build_launch_bound,
    build_stall_and_host_bound,
    build_host_bound_fp32,
    build_stream_wait,
    build_item_syncs,
    lambda: build_item_syncs(item=False),
]


def _both(g: Graph, monkeypatch) -> tuple:
    native = R.replay(g)
    with monkeypatch.context() as m:
        m.setenv("TRACEINSPECT_PURE_REPLAY", "1")
        assert R._native() is None
        py = R.replay(g)
    return native, py


def _assert_identical(a, b):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape, f
        assert np.array_equal(x, y), (f, np.flatnonzero(x != y)[:5])  # exact: same doubles, same binds


def _fixed_graphs(tr):
    """The unmodified graph, then each fix alone and all fixes together (the graphs the verdict replays)."""
    rep = analyze(tr)
    known = E.transforms()
    names = [f.name for f in rep.findings if f.name in known]
    by = {f.name: f for f in rep.findings}
    base = E.graph_of(tr)
    yield base
    for fixes in [(n,) for n in names] + ([tuple(names)] if len(names) > 1 else []):
        g = base.copy()
        for n in fixes:
            known[n]().whatif(g, by[n])
        yield g


@pytest.mark.parametrize("make", BUILDERS)
def test_native_equals_python_on_the_builders(make, tmp_path, monkeypatch):
    tr = load_trace(str(make().write(tmp_path / "x.pt.trace.json")))
    n = 0
    for g in _fixed_graphs(tr):
        _assert_identical(*_both(g, monkeypatch))
        n += 1
    assert n >= 1


def _random_graph(rng, n_h: int, n_g: int) -> Graph:
    """Any edges (forward, backward, self), any durations: both loops must still agree on every value."""

    def edge(n, bound):
        e = rng.integers(-1, bound, n) if bound else np.full(n, -1)
        e[rng.random(n) < 0.3] = -1
        return e.astype(np.int64)

    h_ts = np.sort(rng.uniform(0, 1e4, n_h))
    g_ts = np.sort(rng.uniform(0, 1e4, n_g))
    h_end, g_dur = h_ts + rng.exponential(20, n_h), rng.exponential(30, n_g)
    markers = np.sort(rng.choice(n_h, size=min(n_h, 4), replace=False)).astype(np.int64)
    return Graph(
        trace=None,
        h_ts=h_ts,
        h_end=h_end,
        h_tid=np.zeros(n_h, np.int64),
        h_name=np.array([""] * n_h, dtype=object),
        h_rt=np.full(n_h, -1),
        h_prev=edge(n_h, n_h),
        h_gap=rng.normal(5, 10, n_h),
        h_xprev=edge(n_h, n_h),
        h_xgap=rng.exponential(5, n_h),
        h_own=h_end - h_ts,
        h_wait=edge(n_h, n_g),
        h_resid=rng.normal(0, 3, n_h),
        g_ts=g_ts,
        g_end=g_ts + g_dur,
        g_dur=g_dur,
        g_name=None,
        g_kind=np.array(["kernel"] * n_g, dtype=object),
        g_row=np.arange(n_g),
        g_launch=edge(n_g, n_h),
        g_lat=rng.exponential(1, n_g),
        g_prev=edge(n_g, n_g),
        g_xprev=edge(n_g, n_g),
        g_slack=rng.exponential(2, n_g),
        g_stream=np.zeros(n_g, np.int64),
        g_device=np.zeros(n_g, np.int64),
        markers=markers,
        m_end=markers[1:],
    )


@pytest.mark.parametrize("seed", range(12))
def test_native_equals_python_on_random_graphs(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n_h, n_g = [(0, 0), (1, 0), (0, 3), (5, 5), (200, 300), (3000, 2000)][seed % 6]
    _assert_identical(*_both(_random_graph(rng, n_h, n_g), monkeypatch))


def test_native_equals_python_on_shared_traces(shared_dir, monkeypatch):
    done = 0
    for p in sorted(shared_dir.rglob("*.json*")):
        if p.name == "EXPECTED.json" or done >= 3:
            continue
        try:
            tr = load_trace(str(p))
        except Exception:
            continue
        if not (tr.has_gpu and len(tr.steps)):
            continue
        for g in _fixed_graphs(tr):
            _assert_identical(*_both(g, monkeypatch))
        done += 1
    if not done:
        pytest.skip("no shared GPU trace with steps")


def _args(n_h=3, n_g=2):
    kinds, idxs = np.array([1, 1, 1, 2, 2], np.int8), np.array([0, 1, 2, 0, 1], np.int64)
    hi, hf, gi, gf = (np.full(n_h, -1, np.int64), np.zeros(n_h), np.full(n_g, -1, np.int64), np.zeros(n_g))
    ins = [
        kinds,
        idxs,
        hi,
        hf,
        hi.copy(),
        hf.copy(),
        hf.copy(),
        hi.copy(),
        hf.copy(),
        gi,
        gi.copy(),
        gi.copy(),
        gf,
        gf.copy(),
        gf.copy(),  # g_lat
    ]
    outs = [
        np.ones(n_h),
        np.ones(n_h),
        np.ones(n_g),
        np.ones(n_g),
        np.zeros(n_h, np.int64),
        np.zeros(n_h, np.int64),
        np.zeros(n_g, np.int64),
    ]
    return ins + outs


def test_malformed_arrays_raise_value_error():
    a = _args()
    assert _scan.replay(*a) is None
    cases = {
        "h_prev past the end": (2, np.array([-1, 3, 0], np.int64)),
        "h_xprev past the end": (4, np.array([-1, 0, 99], np.int64)),
        "h_wait past the GPU nodes": (7, np.array([2, -1, -1], np.int64)),
        "g_launch past the host nodes": (9, np.array([0, 3], np.int64)),
        "g_prev past the end": (10, np.array([2, -1], np.int64)),
        "g_xprev huge": (11, np.array([2**62, -1], np.int64)),
        "an order index past the end": (1, np.array([0, 1, 2, 0, 2], np.int64)),
        "a negative order index": (1, np.array([0, -1, 2, 0, 1], np.int64)),
        "an unknown kind": (0, np.array([1, 1, 3, 2, 2], np.int8)),
        "a short host array": (3, np.zeros(2)),
        "a long GPU array": (13, np.zeros(3)),
        "idxs shorter than kinds": (1, np.array([0, 1, 2, 0], np.int64)),
        "an output of the wrong length": (17, np.ones(5)),
        "a short g_lat": (14, np.zeros(1)),
        "4-byte items": (2, np.array([-1, -1, -1], np.int32)),
    }
    for why, (k, bad) in cases.items():
        b = _args()
        b[k] = bad
        outs = [o.copy() for o in b[15:]]
        with pytest.raises(ValueError, match="replay"):
            _scan.replay(*b)
        assert all(np.array_equal(o, p) for o, p in zip(b[15:], outs)), why  # nothing written
    with pytest.raises(TypeError):
        _scan.replay(*a[:-1])
    with pytest.raises(TypeError):  # a read-only output
        b = _args()
        b[15] = bytes(24)
        _scan.replay(*b)


def test_a_malformed_graph_raises_through_replay(monkeypatch):
    g = _random_graph(np.random.default_rng(0), 50, 40)
    for field, bad in (("h_xprev", 50), ("g_xprev", 40), ("g_prev", 10**9)):  # edges the order does not read
        h = g.copy()
        edges = getattr(h, field).copy()  # the measured edges are shared with g, read-only: a new array
        edges[7] = bad
        setattr(h, field, edges)
        with pytest.raises(ValueError, match="out of range"):
            R.replay(h)


def test_event_order_memo_follows_changed_edges(tmp_path, monkeypatch):
    """A transformation that drops waits changes the order; the memo must not hand back the old one."""
    tr = load_trace(str(build_item_syncs().write(tmp_path / "x.pt.trace.json")))
    base = E.graph_of(tr)
    assert (base.h_wait >= 0).any()
    k0, i0 = R.event_order(base)
    g = base.copy()
    g.h_wait = np.full_like(g.h_wait, -1)
    k1, i1 = R.event_order(g)
    assert len(k1) < len(k0)  # the wait-end events are gone
    fresh = R._event_order(g)
    assert np.array_equal(k1, fresh[0]) and np.array_equal(i1, fresh[1])
    assert R.event_order(base.copy())[1] is i0  # same edges, a copy: the memo hits
    _assert_identical(*_both(g, monkeypatch))


def test_a_fix_set_that_changes_nothing_reuses_the_identity_replay(tmp_path, monkeypatch):
    tr = load_trace(str(build_stall_and_host_bound().write(tmp_path / "x.pt.trace.json")))
    rep = analyze(tr)
    calls = []
    monkeypatch.setattr(E, "replay", lambda g: calls.append(g) or R.replay(g))
    ident = E.predict(tr, rep.findings, ())  # memoised by analyze's verdict or here
    n = len(calls)
    assert n <= 1
    nothing = E.predict(tr, rep.findings, ("no-such-fix",))  # no transformation: the graph is unchanged
    assert len(calls) == n and np.array_equal(ident.replay_us, nothing.replay_us)
    fixed = E.predict(tr, rep.findings, ("dataloader-stall",))  # a fix that changes gaps: replayed
    assert len(calls) == n + 1 and fixed.median_us < ident.median_us


def test_a_copy_shares_the_measured_structure_read_only():
    """Graph.copy copies what transformations write (Graph.MUTABLE) and shares the rest read-only: a
    transformation that wrote the measured structure in place would change every copy, so it fails."""
    g = _random_graph(np.random.default_rng(1), 30, 20)
    h = g.copy()
    assert h.h_ts is g.h_ts and not h.h_ts.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        h.g_prev[0] = 3
    for name in g.MUTABLE:
        a = getattr(h, name)
        assert a is not getattr(g, name) and a.flags.writeable
    h.g_dur[0] += 1.0
    assert h.g_dur[0] == g.g_dur[0] + 1.0
