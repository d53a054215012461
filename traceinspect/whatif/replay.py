"""Discrete-event replay of a Graph: every node's start and end from its predecessors' ends, in one pass.

Owns the simulation and the critical path read off it. Must not build graphs or know about detectors.
"""
from __future__ import annotations

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
    step_us: np.ndarray          # one per analysed step, from its start marker to its end marker


def replay(g: Graph) -> Replay:
    n_h, n_g = len(g.h_ts), len(g.g_ts)
    # event order: the measured times, which respect every edge (an edge runs from an earlier measured
    # time to a later one); ties: wait ends (0) before host starts (1) before GPU ops (2)
    h_key = g.h_ts.copy()
    hp = g.h_prev
    has = hp >= 0
    h_key[has] = np.maximum(h_key[has], g.h_end[hp[has]])            # a call overlapping its predecessor
    g_key = g.g_ts.copy()
    gl = g.g_launch >= 0
    g_key[gl] = np.maximum(g_key[gl], h_key[g.g_launch[gl]])       # GPU clock ahead of the host's
    w = np.flatnonzero(g.h_wait >= 0)
    w_key = np.maximum(g.h_end[w], g_key[g.h_wait[w]])
    keys = np.concatenate([w_key, h_key, g_key])
    kind = np.concatenate([np.zeros(len(w), np.int8), np.ones(n_h, np.int8), np.full(n_g, 2, np.int8)])
    idx = np.concatenate([w, np.arange(n_h), np.arange(n_g)])
    order = np.lexsort((kind, keys))

    hs, he = g.h_ts.astype(float).tolist(), g.h_end.astype(float).tolist()
    gs, ge = g.g_ts.astype(float).tolist(), g.g_end.astype(float).tolist()
    h_prev, h_gap, h_x, h_xgap = g.h_prev.tolist(), g.h_gap.tolist(), g.h_xprev.tolist(), g.h_xgap.tolist()
    h_own, h_wait, h_res = g.h_own.tolist(), g.h_wait.tolist(), g.h_resid.tolist()
    g_l, g_p, g_x, g_sl, g_d = g.g_launch.tolist(), g.g_prev.tolist(), g.g_xprev.tolist(), g.g_slack.tolist(), g.g_dur.tolist()
    hb, heb, gb = [FIXED] * n_h, [OWN] * n_h, [FIXED] * n_g
    kinds, idxs = kind[order].tolist(), idx[order].tolist()
    for k, i in zip(kinds, idxs):
        if k == 1:
            p = h_prev[i]
            t, b = (he[p] + h_gap[i], THREAD) if p >= 0 else (hs[i], FIXED)
            x = h_x[i]
            if x >= 0:
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
                t, b, anchored = hs[lch], LAUNCH, True
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
    h_start, h_end = np.array(hs), np.array(he)
    step = h_start[g.m_end] - h_start[g.markers[:-1]] if len(g.markers) > 1 else np.zeros(0)
    return Replay(h_start=h_start, h_end=h_end, g_start=np.array(gs), g_end=np.array(ge),
                  h_bind=np.array(hb), h_end_bind=np.array(heb), g_bind=np.array(gb), step_us=step)


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
