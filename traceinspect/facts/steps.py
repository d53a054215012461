"""Step windows: the analysed steps as an interval set, the timeline's idle parts inside them, and the
rows of a table that fall inside them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace import intervals as iv
from ..trace.model import Trace
from .device import primary_kernels


def step_set(trace: Trace) -> iv.Set:
    """The analysed steps as one interval set (computed once per trace and step selection). Read-only."""
    return trace.memo("facts: step set", lambda: iv.union(trace.steps["start_us"], trace.steps["end_us"]))


def idle_in_steps(trace: Trace, part: str) -> iv.Set:
    """The timeline's idle part `part` (idle_launch, idle_cpu, ...) inside the analysed steps. Read-only."""
    return trace.memo(("facts: idle in steps", part), lambda: iv.intersect(trace.timeline.sets[part], step_set(trace)))


def in_steps_mask(trace: Trace, ts: np.ndarray) -> np.ndarray:
    """Over the timestamps `ts`: inside one of the analysed steps (steps do not overlap)."""
    st = trace.steps
    if not len(st):
        return np.zeros(len(ts), dtype=bool)
    i = np.searchsorted(st["start_us"].to_numpy(), ts, side="right") - 1
    return (i >= 0) & (ts < st["end_us"].to_numpy()[np.maximum(i, 0)])


def in_steps(df: pd.DataFrame, trace: Trace, col: str = "ts_us") -> pd.DataFrame:
    """Rows whose timestamp falls inside one of the analysed steps."""
    if len(df) == 0:
        return df
    return df[in_steps_mask(trace, df[col].to_numpy())]


def step_kernels(trace: Trace) -> pd.DataFrame:
    """The primary device's kernels inside the analysed steps (computed once per trace and step
    selection). Read-only."""
    return trace.memo("facts: primary-device kernels in steps", lambda: in_steps(primary_kernels(trace), trace))
