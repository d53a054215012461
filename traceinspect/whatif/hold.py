"""The measured graph of a trace, its identity replay, and a replay held at the GPU work it keeps: the
three things every replay of a fix starts from (engine.predict) and the batch sweep (batch.py) runs on.
Below engine and batch, so that neither imports the other."""

from __future__ import annotations

import numpy as np

from ..trace.model import Trace
from .graph import Graph, build
from .replay import replay


def graph_of(trace: Trace) -> Graph:
    return trace.memo("whatif graph", lambda: build(trace))


def _work(g: Graph, r, step_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per replayed step and stream: the GPU op time (a stream runs one op at a time) counted in the step
    whose host launched it (the launch's replayed start). An op without a launch record counts with the
    launched op before it on its stream (work queued behind it), or at its replayed start where none
    precedes it. Returns the (steps, streams) matrix, each op's step (-1 or n: outside the window) and its
    stream column."""
    n = len(step_starts) - 1
    key = g.structural("stream column", lambda: np.unique(g.g_stream, return_inverse=True)[1].reshape(-1))
    if n <= 0 or not len(g.g_ts):
        return np.zeros((max(n, 0), 1)), np.full(len(g.g_ts), -1), key
    launched = g.g_launch >= 0
    at = np.where(launched, r.h_start[np.maximum(g.g_launch, 0)], r.g_start)
    step = np.searchsorted(step_starts, at, side="right") - 1
    if (~launched).any() and launched.any():
        order, fill, last = g.structural("unlaunched ops", lambda: _unlaunched(g, launched))
        s_sorted = step[order]
        s_sorted[fill] = s_sorted[last[fill]]
        step[order] = s_sorted
    ok = (step >= 0) & (step < n)
    cols = int(key.max()) + 1
    m = np.bincount(step[ok] * cols + key[ok], weights=g.g_dur[ok], minlength=n * cols).reshape(n, cols)
    return m, step, key


def _unlaunched(g: Graph, launched: np.ndarray):
    """The stream order, and for each op without a launch record the launched op before it on its
    stream, when there is one (a fact of the measured structure)."""
    order = np.lexsort((g.g_ts, g.g_stream))
    pos = np.arange(len(order))
    last = np.maximum.accumulate(np.where(launched[order], pos, -1))
    stream = g.g_stream[order]
    first = np.r_[0, np.flatnonzero(stream[1:] != stream[:-1]) + 1]
    group_start = np.repeat(first, np.diff(np.r_[first, len(order)]))
    fill = ~launched[order] & (last >= group_start)
    return order, fill, last


def _step_starts(g: Graph, r) -> np.ndarray:
    """The replayed start of each step, then the start of the marker after the last step."""
    return r.h_start[g.markers] if len(g.markers) else np.zeros(0)


def _queued(g: Graph, r) -> np.ndarray:
    """Per stream: the most GPU work the replayed run had launched in its steps but not yet run at a step's
    end (us). A stream runs its ops in launch order, so what it has run by then is its busy time since the
    first step's start, up to the work launched so far."""
    starts = _step_starts(g, r)
    m, step, key = _work(g, r, starts)
    if not len(m) or not len(r.step_us):
        return np.zeros(m.shape[1])
    ends = r.h_start[g.m_end]
    ok = (step >= 0) & (step < len(m))
    s0 = float(starts[0])
    out = np.zeros(m.shape[1])
    cum = np.cumsum(m, axis=0)
    for c in np.unique(key[ok]):
        sel = ok & (key == c)
        a = np.maximum(r.g_start[sel], s0)
        b = np.maximum(a + g.g_dur[sel], a)
        o = np.argsort(b, kind="stable")
        a, b = a[o], b[o]
        run = np.r_[0.0, np.cumsum(b - a)]
        k = np.searchsorted(b, ends, side="right")  # ops done by each step end
        i = np.minimum(k, len(a) - 1)  # the op running then, if any: the part of it already run
        part = np.where(k < len(a), np.clip(ends - a[i], 0.0, b[i] - a[i]), 0.0)
        busy = run[k] + part
        out[c] = max(0.0, float((cum[:, c] - busy).max()))
    return out


def gpu_lag(trace: Trace) -> np.ndarray:
    """Per stream, how far the measured window's GPU ran behind its host at most: the work launched in
    its steps and not yet run at a step's end (`_queued` on the unmodified graph). The window shows the
    launch queue held this much, so a prediction may let the GPU trail its host by as much."""
    return trace.memo("whatif gpu lag", lambda: _queued(graph_of(trace), identity_replay(trace)))


def hold(g: Graph, r) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, floor, work): the replayed steps held at the GPU work they keep, cumulatively. Step j
    cannot end before each stream has run the work launched through step j, less the most the measured
    window left queued on it (`gpu_lag`, scaled with the graph's time unit); once held, the host stays
    behind by that much. floor: the steps with no host time at all (the GPU work alone); work: the
    busiest stream's work in each step."""
    n = len(r.step_us)
    starts = _step_starts(g, r)
    m = _work(g, r, starts)[0]
    if not n or len(m) != n:
        return r.step_us, np.zeros(n), np.zeros(n)
    lag = gpu_lag(g.trace)
    lag = lag if len(lag) == m.shape[1] else np.zeros(m.shape[1])
    h = np.maximum(np.cumsum(m, axis=0) - lag * g.time_scale, 0.0).max(axis=1)
    ends = r.h_start[g.m_end] - starts[0]
    shift = np.maximum.accumulate(np.maximum(h - ends, 0.0))
    steps = r.step_us + np.diff(np.r_[0.0, shift])
    return steps, np.diff(np.r_[0.0, h]), m.max(axis=1)


def identity_replay(trace: Trace):
    return trace.memo("whatif identity replay", lambda: replay(graph_of(trace)))


def replay_steps(g: Graph) -> np.ndarray:
    """Per analysed step: the replay of a (transformed) graph held at the GPU work it keeps, as predict()
    gives it (no critical path, no provenance)."""
    return hold(g, replay(g))[0]
