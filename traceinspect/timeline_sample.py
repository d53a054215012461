"""The compact timeline of one representative step that Report.timeline_sample carries for the HTML chart.

Reads a Trace's derived timeline (never the raw tables) and returns plain JSON-able data; renders
nothing. Lives beside analyze.py, not under render/, because renderers must not touch a Trace.
"""
from __future__ import annotations

import numpy as np

from .trace import intervals as iv
from .trace.timeline import PARTS

MAX_INTERVALS = 3000       # keeps the JSON report and the HTML chart small (a few hundred KB at most)
PIXELS = 2000              # intervals closer than step/PIXELS merge: invisible at any sane chart width


def representative_step(trace) -> dict:
    """The median-length step: its busy intervals by part and its idle gaps by cause.

    Returns {} when the trace has no GPU activity or no steps. Times are microseconds relative to
    the step's start. Same-part intervals separated by less than `resolution_us` are merged, and
    when more than MAX_INTERVALS remain only the longest are kept (`dropped` counts the rest).
    """
    if not trace.has_gpu:
        return {}
    steps = trace.steps
    if not len(steps):
        return {}
    dur = steps["dur_us"].to_numpy()
    # the lower median, so the chosen step is a real one even with an even number of steps
    i = int(np.argsort(dur, kind="stable")[(dur.size - 1) // 2])
    lo = float(steps["start_us"].iloc[i])
    hi = float(steps["end_us"].iloc[i])
    step_dur = hi - lo
    resolution = step_dur / PIXELS if step_dur > 0 else 0.0
    sets = trace.timeline.sets
    parts: dict[str, list[list[float]]] = {}
    for part in PARTS:
        s, e = iv.clip(sets.get(part, iv.EMPTY), lo, hi)
        s, e = _coalesce(s, e, resolution)
        if s.size:
            parts[part] = [[round(float(a - lo), 1), round(float(b - lo), 1)] for a, b in zip(s, e)]
    parts, dropped = _cap(parts, MAX_INTERVALS)
    return {
        "step": int(steps["step"].iloc[i]),
        "index": i,
        "start_us": round(lo, 3),
        "dur_us": round(step_dur, 3),
        "device": trace.timeline.device,
        "resolution_us": round(resolution, 3),
        "choice": "median-length step",
        "intervals": parts,
        "dropped": dropped,
    }


def _coalesce(s: np.ndarray, e: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Merge neighbours of one disjoint sorted set whose gap is below `gap` microseconds."""
    if s.size < 2 or gap <= 0:
        return s, e
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = (s[1:] - e[:-1]) >= gap
    idx = np.flatnonzero(new)
    return s[idx], e[np.r_[idx[1:] - 1, s.size - 1]]


def _cap(parts: dict, limit: int) -> tuple[dict, int]:
    n = sum(len(v) for v in parts.values())
    if n <= limit:
        return parts, 0
    every = sorted(((b - a, p, j) for p, v in parts.items() for j, (a, b) in enumerate(v)), reverse=True)
    keep: dict[str, set] = {}
    for _, p, j in every[:limit]:
        keep.setdefault(p, set()).add(j)
    out = {p: [x for j, x in enumerate(v) if j in keep.get(p, ())] for p, v in parts.items()}
    return {p: v for p, v in out.items() if v}, n - limit
