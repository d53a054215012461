"""The compact timeline of one representative step that Report.timeline_sample carries for the HTML chart.

Reads a Trace's derived timeline (never the raw tables) and returns plain JSON-able data; renders
nothing. Lives beside analyze.py, not under render/, because renderers must not touch a Trace.
"""

from __future__ import annotations

import numpy as np

from .sections import TimelineSample
from .trace import intervals as iv
from .trace.timeline import BUSY_PARTS, IDLE_PARTS

MAX_INTERVALS = 6000  # keeps the JSON report and the HTML chart small (a few hundred KB at most)
PIXELS = 1000  # columns the step is drawn in: finer than the chart's width in pixels


def representative_step(trace) -> TimelineSample:
    """The median-length step: its busy intervals by part and its idle gaps by cause.

    Empty (TimelineSample()) when the trace has no GPU activity or no steps. Times are microseconds relative to
    the step's start. Same-part intervals separated by less than `resolution_us` are merged, and
    when more than MAX_INTERVALS remain only the longest are kept (`dropped` counts the rest).
    """
    if not trace.has_gpu:
        return TimelineSample()
    steps = trace.steps
    if not len(steps):
        return TimelineSample()
    dur = steps["dur_us"].to_numpy()
    # the lower median, so the chosen step is a real one even with an even number of steps
    i = int(np.argsort(dur, kind="stable")[(dur.size - 1) // 2])
    lo = float(steps["start_us"].iloc[i])
    hi = float(steps["end_us"].iloc[i])
    step_dur = hi - lo
    resolution = step_dur / PIXELS if step_dur > 0 else 0.0
    parts, dropped = _cap(_columns(trace.timeline.sets, lo, hi, PIXELS), MAX_INTERVALS)
    dev = trace.timeline.device
    return TimelineSample(
        step=int(steps["step"].iloc[i]),
        index=i,
        start_us=round(lo, 3),
        dur_us=round(step_dur, 3),
        device=None if dev is None else int(dev),
        resolution_us=round(resolution, 3),
        choice="median-length step",
        intervals=parts,
        dropped=int(dropped),
    )


def _columns(sets: dict, lo: float, hi: float, n: int) -> dict[str, list[list[float]]]:
    """Each part at its true extent, at the chart's resolution: the step is cut into n columns and, in each,
    every part gets a bar as long as the time it really has there, the parts of one lane (busy, idle) side
    by side from the column's start. A part drawn thus totals exactly its time in the step; merging nearby
    intervals instead drew a few microseconds of idle between back-to-back kernels as a solid block over
    the whole burst. Bars that touch are merged, so a part filling many columns is one interval."""
    if hi <= lo:
        return {}
    edges = np.linspace(lo, hi, n + 1)
    a, b = edges[:-1], edges[1:]
    out: dict[str, list[list[float]]] = {}
    for lane in (BUSY_PARTS, IDLE_PARTS):
        offset = np.zeros(n)
        for part in lane:
            cov = iv.per_window(iv.clip(sets.get(part, iv.EMPTY), lo, hi), a, b)
            keep = cov > 0
            s, e = a[keep] + offset[keep], a[keep] + offset[keep] + cov[keep]
            offset += cov
            s, e = _coalesce(s, e, 1e-6 * (hi - lo))
            spans = [[round(float(x - lo), 1), round(float(y - lo), 1)] for x, y in zip(s, e)]
            spans = [sp for sp in spans if sp[1] > sp[0]]
            if spans:
                out[part] = spans
    return out


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
