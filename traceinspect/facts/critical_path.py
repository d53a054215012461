"""Critical-path membership: which kernels' savings would shorten the step (read by fp32-gemm,
eager-attention and padding-waste)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace import intervals as iv
from ..trace.tables import name_flags
from ..trace.timeline import SYNC_CALLS

WAIT_GRACE_US = 20.0  # a blocking call that returned this soon after the GPU went idle was waiting on it


def on_critical_path(trace, kin: pd.DataFrame, delta: np.ndarray) -> tuple[float, float]:
    """Wall time the per-kernel savings `delta` would give back, and the share of the kernels' time that is
    on the critical path.

    The GPU works in busy runs separated by idle gaps. A run that ends because the host had nothing
    queued (the host was late: launch overhead, DataLoader, other CPU work) gains nothing from faster
    kernels: the gap just grows. A run that ends while the host is blocked in a synchronising call
    (cudaStreamSynchronize, cudaDeviceSynchronize, a blocking cudaMemcpy ...) waiting for it, or that
    reaches the end of the window, finishes earlier by the kernels' savings, at most by how long the
    host had been waiting."""
    tl = trace.timeline
    rt = trace.runtime
    if not len(rt) or not len(tl.gaps):
        return float(delta.sum()), 1.0
    # whole idle gaps, each with the cause of its first piece (why the GPU went idle); gaps whose next op
    # was already queued (cause "unknown": back-to-back kernels, cross-stream waits) do not end a run
    pieces = tl.gaps
    gaps = iv.union(pieces["start_us"].to_numpy(), pieces["end_us"].to_numpy())
    first = np.searchsorted(pieces["start_us"].to_numpy(), gaps[0], side="left")
    unknown = (pieces["cause"] == "unknown").to_numpy()
    ends_run = ~unknown[np.minimum(first, len(pieces) - 1)]
    gaps = (gaps[0][ends_run], gaps[1][ends_run])
    names = rt["name"]
    sync = name_flags(names, lambda n: n in SYNC_CALLS or n.startswith(("cudaMemcpy", "hipMemcpy")))
    srt = rt[sync]
    # [start of the blocking call, its end + grace): the host is waiting on the GPU inside it
    waits = iv.union(srt["ts_us"].to_numpy(), srt["end_us"].to_numpy() + WAIT_GRACE_US) if len(srt) else iv.EMPTY
    gstart = gaps[0]
    j = np.searchsorted(gstart, kin["end_us"].to_numpy() - 1e-6, side="left")  # the gap that ends each kernel's run
    dur = kin["dur_us"].to_numpy()
    runs, inv = np.unique(j, return_inverse=True)
    d_run = np.bincount(inv, weights=delta, minlength=runs.size)
    dur_run = np.bincount(inv, weights=dur, minlength=runs.size)
    open_end = runs >= gstart.size  # the run reaches the end of the window
    g = gstart[np.minimum(runs, max(gstart.size - 1, 0))] if gstart.size else np.zeros(runs.size)
    if waits[0].size:
        w = np.searchsorted(waits[0], g, side="right") - 1
        wc = np.maximum(w, 0)
        blocked = (w >= 0) & (g < waits[1][wc])  # the host sat in a blocking call, waiting for this run
        waited = g - waits[0][wc]
    else:
        blocked = np.zeros(runs.size, dtype=bool)
        waited = np.zeros(runs.size)
    blocked &= ~open_end
    saved = np.where(open_end, d_run, np.where(blocked, np.minimum(d_run, waited), 0.0))
    critical = open_end | blocked
    total = float(dur.sum())
    return float(saved.sum()), (float(dur_run[critical].sum()) / total if total else 0.0)
