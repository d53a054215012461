"""The batch-size fix sized by the replay: the launch-bound larger-batch transformation replayed at
2x, 4x, 8x, ... the batch, and the smallest factor past which the time per sample improves by less than
GAIN_MIN_FRAC, capped by the memory model's largest fitting factor (docs/whatif.md, "Batch size").

Owns the sweep and the one recommended factor every part of a report shows (the launch-bound fix, its
what-if, the memory section). Must not render or judge whether the run is launch-bound (the detector does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..facts.memory_fit import BatchFit, batch_fit_for
from ..trace.model import Trace
from .hold import graph_of, replay_steps

# Doubling the batch must still cut the replayed time per sample by this share to be worth it: below it
# the step is bound by work that grows with the batch and a larger batch only costs memory.
GAIN_MIN_FRAC = 0.05
# The sweep stops here when no memory model caps it (a bound on the search, not advice).
SWEEP_MAX = 1024


@dataclass(frozen=True)
class BatchPlan:
    factor: int  # the recommended growth (1: none; fit.factor where the memory model sized it)
    fit: BatchFit | None  # the memory model's sizing at that factor (None: no memory figures)
    sweep: tuple[tuple[int, float], ...]  # (factor, replayed median step per original batch, us), from 1x
    why: str  # how the factor was chosen
    cap: float | None  # the memory model's largest fitting growth (None: no memory figures)


def batch_plan(trace: Trace) -> BatchPlan:
    """The run's batch plan (computed once per trace)."""
    return trace.memo("whatif batch plan", lambda: _plan(trace))


def _plan(trace: Trace) -> BatchPlan:
    from ..detectors.launch_bound import LaunchBound

    probe = batch_fit_for(trace, 1)
    cap = probe.max_factor if probe is not None else None
    limit = min(SWEEP_MAX, int(math.floor(cap + 1e-9))) if cap is not None else SWEEP_MAX
    base = graph_of(trace)
    det = LaunchBound()
    sweep = [(1, float(np.median(replay_steps(base))))]
    knee = None
    k = 2
    while k <= limit:
        g = base.copy()
        det.scale_batch(g, k)
        sweep.append((k, float(np.median(replay_steps(g)))))
        prev, now = sweep[-2][1], sweep[-1][1]
        if prev > 0 and now > (1.0 - GAIN_MIN_FRAC) * prev:
            knee = sweep[-2][0]  # doubling past the previous factor gained under GAIN_MIN_FRAC
            break
        k *= 2
    if knee is None:
        knee = sweep[-1][0]
        why = (
            f"the largest power of 2 under the memory model's {cap:.1f}x"
            if cap is not None and limit < SWEEP_MAX
            else f"each doubling up to {knee}x still gains {100 * GAIN_MIN_FRAC:g}% or more per sample"
        )
    else:
        why = (
            f"doubling past {knee}x gains under {100 * GAIN_MIN_FRAC:g}% per sample in the replay"
            if knee >= 2
            else f"doubling the batch gains under {100 * GAIN_MIN_FRAC:g}% per sample in the replay"
        )
    fit = batch_fit_for(trace, knee) if knee >= 2 else probe
    factor = fit.factor if fit is not None else knee
    if fit is not None and factor < knee:
        why += f"; {factor}x keeps the gradient accumulation a whole number"
    return BatchPlan(factor=factor, fit=fit, sweep=tuple(sweep), why=why, cap=cap)
