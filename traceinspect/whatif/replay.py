"""Discrete-event replay of a Graph: every node's start and end from its predecessors' ends, in one pass.

Owns the simulation and the critical path read off it. Must not build graphs or know about detectors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .graph import Graph

# what bound a node's start (critical-path bookkeeping)
FIXED, THREAD, XTHREAD, LAUNCH, STREAM, XSTREAM, WAIT, OWN = range(8)
PATH_PARTS = ("gpu", "launch_latency", "host_work", "host_call", "host_wait_residual", "anchor")


@dataclass
class Replay:
    h_start: np.ndarray
    h_end: np.ndarray
    g_start: np.ndarray
    g_end: np.ndarray
    h_bind: np.ndarray
    h_end_bind: np.ndarray
    g_bind: np.ndarray
    step_us: np.ndarray  # one per analysed step, from its start marker to its end marker


def event_order(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(kinds, idxs): the nodes in replay order. It reads only the measured times and the edges, so a
    transformation that edits durations and gaps keeps it; it is memoised per trace and edge set."""
    cache = _order_cache(g)
    key = tuple(np.asarray(getattr(g, f)) for f in _ORDER_FIELDS)
    for k, v in cache or ():
        if all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(k, key)):
            return v
    v = _event_order(g)
    if cache is not None:
        cache.append((tuple(a.copy() for a in key), v))
        del cache[:-_ORDER_CACHE_SIZE]
    return v


# what the event order reads; the cache keeps this many edge sets per trace
_ORDER_FIELDS = ("h_ts", "h_end", "h_prev", "g_ts", "g_end", "g_launch", "h_wait")
_ORDER_CACHE_SIZE = 4


def _order_cache(g: Graph) -> list | None:
    memo = getattr(g.trace, "memo", None)
    return memo("whatif replay order", list) if callable(memo) else None


def _event_order(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    n_h, n_g = len(g.h_ts), len(g.g_ts)
    # event order: the measured times, which respect every edge (an edge runs from an earlier measured
    # time to a later one); ties: wait ends (0) before host starts (1) before GPU ops (2)
    h_key = g.h_ts.copy()
    hp = g.h_prev
    has = hp >= 0
    h_key[has] = np.maximum(h_key[has], g.h_end[hp[has]])  # a call overlapping its predecessor
    g_key = g.g_ts.copy()
    gl = g.g_launch >= 0
    g_key[gl] = np.maximum(g_key[gl], h_key[g.g_launch[gl]])  # GPU clock ahead of the host's
    # a wait ends after the op it waits for has run, even where the call returned at the very time the op
    # ended (a zero-length kernel launched by a blocking launch call): read before that op, the wait would
    # take its measured end, and pin every later host node to its measured time however the fix moves it
    w = np.flatnonzero(g.h_wait >= 0)
    o = g.h_wait[w]
    w_key = np.maximum(g.h_end[w], np.nextafter(g_key[o] + (g.g_end[o] - g.g_ts[o]), np.inf))
    # ... and the next call on the thread starts after that wait ends, as do the ops it launches
    nxt = np.flatnonzero(has)
    at = np.full(n_h, -np.inf)
    at[w] = w_key
    bumped = nxt[at[hp[nxt]] > h_key[nxt]]
    if len(bumped):
        h_key[bumped] = at[hp[bumped]]
        g_key[gl] = np.maximum(g.g_ts[gl], h_key[g.g_launch[gl]])
    keys = np.concatenate([w_key, h_key, g_key])
    kind = np.concatenate([np.zeros(len(w), np.int8), np.ones(n_h, np.int8), np.full(n_g, 2, np.int8)])
    idx = np.concatenate([w, np.arange(n_h), np.arange(n_g)]).astype(np.int64)
    order = np.lexsort((kind, keys))
    return np.ascontiguousarray(kind[order]), np.ascontiguousarray(idx[order])


def _native():
    """The C loop (traceinspect/trace/_scan.c), or None: when the extension is absent or
    TRACEINSPECT_PURE_REPLAY=1 (the Python loop below, identical results)."""
    if os.environ.get("TRACEINSPECT_PURE_REPLAY") == "1":
        return None
    try:
        from ..trace import _scan
    except ImportError:
        return None
    return getattr(_scan, "replay", None)


def replay(g: Graph) -> Replay:
    kinds, idxs = event_order(g)
    native = _native()
    if native is not None:
        f8 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
        i8 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        n_h, n_g = len(g.h_ts), len(g.g_ts)
        h_start, h_end = np.array(g.h_ts, dtype=np.float64), np.array(g.h_end, dtype=np.float64)
        g_start, g_end = np.array(g.g_ts, dtype=np.float64), np.array(g.g_end, dtype=np.float64)
        hb, heb, gb = np.full(n_h, FIXED, np.int64), np.full(n_h, OWN, np.int64), np.full(n_g, FIXED, np.int64)
        native(
            kinds,
            idxs,
            i8(g.h_prev),
            f8(g.h_gap),
            i8(g.h_xprev),
            f8(g.h_xgap),
            f8(g.h_own),
            i8(g.h_wait),
            f8(g.h_resid),
            i8(g.g_launch),
            i8(g.g_prev),
            i8(g.g_xprev),
            f8(g.g_slack),
            f8(g.g_dur),
            f8(g.g_lat),
            h_start,
            h_end,
            g_start,
            g_end,
            hb,
            heb,
            gb,
        )
    else:
        h_start, h_end, g_start, g_end, hb, heb, gb = _replay_py(g, kinds, idxs)
    step = h_start[g.m_end] - h_start[g.markers[:-1]] if len(g.markers) > 1 else np.zeros(0)
    return Replay(
        h_start=h_start, h_end=h_end, g_start=g_start, g_end=g_end, h_bind=hb, h_end_bind=heb, g_bind=gb, step_us=step
    )


def _replay_py(g: Graph, kinds: np.ndarray, idxs: np.ndarray) -> tuple:
    """The replay loop in Python: the fallback, and the reference the C loop is held to."""
    n_h, n_g = len(g.h_ts), len(g.g_ts)
    hs, he = g.h_ts.astype(float).tolist(), g.h_end.astype(float).tolist()
    gs, ge = g.g_ts.astype(float).tolist(), g.g_end.astype(float).tolist()
    h_prev, h_gap, h_x, h_xgap = g.h_prev.tolist(), g.h_gap.tolist(), g.h_xprev.tolist(), g.h_xgap.tolist()
    h_own, h_wait, h_res = g.h_own.tolist(), g.h_wait.tolist(), g.h_resid.tolist()
    g_l, g_p, g_x, g_sl, g_d = (
        g.g_launch.tolist(),
        g.g_prev.tolist(),
        g.g_xprev.tolist(),
        g.g_slack.tolist(),
        g.g_dur.tolist(),
    )
    g_lat = g.g_lat.tolist()
    hb, heb, gb = [FIXED] * n_h, [OWN] * n_h, [FIXED] * n_g
    for k, i in zip(kinds.tolist(), idxs.tolist()):
        if k == 1:
            p, x = h_prev[i], h_x[i]
            if p >= 0:
                t, b = he[p] + h_gap[i], THREAD
            elif x >= 0:  # a thread's first call: it starts when the call that handed off to it ends
                t, b = he[x] + h_xgap[i], XTHREAD
            else:
                t, b = hs[i], FIXED
            if x >= 0 and b != XTHREAD:
                tx = he[x] + h_xgap[i]
                if tx > t:
                    t, b = tx, XTHREAD
            hs[i] = t
            hb[i] = b
            he[i] = t + h_own[i]
        elif k == 2:
            t, b = gs[i], FIXED
            lch, p, x = g_l[i], g_p[i], g_x[i]
            anchored = False
            if lch >= 0:
                t, b, anchored = hs[lch] + g_lat[i], LAUNCH, True
            if p >= 0 and (not anchored or ge[p] > t):
                t, b, anchored = ge[p], STREAM, True
            if x >= 0 and (not anchored or ge[x] > t):
                t, b = ge[x], XSTREAM
            t += g_sl[i]
            gs[i] = t
            ge[i] = t + g_d[i]
            gb[i] = b
        else:
            o = h_wait[i]
            if o >= 0:
                t = ge[o] + h_res[i]
                if t > he[i]:
                    he[i] = t
                    heb[i] = WAIT
    return (
        np.array(hs, dtype=np.float64),
        np.array(he, dtype=np.float64),
        np.array(gs, dtype=np.float64),
        np.array(ge, dtype=np.float64),
        np.array(hb, dtype=np.int64),
        np.array(heb, dtype=np.int64),
        np.array(gb, dtype=np.int64),
    )


def critical_path(g: Graph, r: Replay) -> dict:
    """Walk back from the last step's end marker to the first step's start marker along the edges that
    bound each start, and add up what the path spends its time on (us over the analysed window)."""
    out = dict.fromkeys(PATH_PARTS, 0.0)
    if len(g.markers) < 2:
        return out
    stop = float(r.h_start[g.markers[0]])
    node, is_host, at_end = int(g.markers[-1]), True, False
    guard = len(g.h_ts) + len(g.g_ts) + 8
    while guard > 0:
        guard -= 1
        if is_host:
            if at_end and r.h_end_bind[node] == WAIT:
                o = int(g.h_wait[node])
                out["host_wait_residual"] += r.h_end[node] - r.g_end[o]
                node, is_host, at_end = o, False, True
                continue
            if at_end:
                out["host_call"] += r.h_end[node] - r.h_start[node]
            b = r.h_bind[node]
            if r.h_start[node] <= stop or b == FIXED:
                out["anchor"] += max(float(r.h_start[node]) - stop, 0.0)
                break
            p = int(g.h_prev[node]) if b == THREAD else int(g.h_xprev[node])
            out["host_work"] += r.h_start[node] - r.h_end[p]
            node, is_host, at_end = p, True, True
        else:
            out["gpu"] += r.g_end[node] - r.g_start[node]
            b = r.g_bind[node]
            if b == FIXED or r.g_start[node] <= stop:
                out["anchor"] += max(float(r.g_start[node]) - stop, 0.0)
                break
            if b == LAUNCH:
                p = int(g.g_launch[node])
                out["launch_latency"] += r.g_start[node] - r.h_start[p]
                node, is_host, at_end = p, True, False
            else:
                p = int(g.g_prev[node]) if b == STREAM else int(g.g_xprev[node])
                out["launch_latency"] += r.g_start[node] - r.g_end[p]
                node, is_host, at_end = p, False, True
    return out
