"""GPU busy/idle per device and per step, and what the host was doing during each idle gap.

Owns the breakdown every report opens with. Each microsecond of a step window lands in exactly one
category, so the parts sum to the step time. Must not judge causes beyond labelling idle time.

Idle attribution, for each idle gap of the device (unknown is decided first, then in this order):
  dataloader  the host thread was inside a DataLoader `__next__` span;
  sync        the host was blocked in a synchronising call (cudaStreamSynchronize, cudaDeviceSynchronize,
              cudaEventSynchronize, blocking cudaMemcpy, hip* twins), or had returned from one at most
              SYNC_RELAUNCH_US earlier: the GPU drained its queue and waits for the host to relaunch.
              Idle beyond that allowance is classified like any other gap (a long CPU step after a
              sync is CPU work, not the sync's cost);
  launch      the next GPU op was launched only after the GPU went idle (the host was late) and the gap
              is short (<= LAUNCH_GAP_MAX_US): per-op CPU dispatch + launch overhead;
  cpu         the host was late and the gap is longer: other CPU work (Python, CPU-side optimizer,
              logging) between launches;
  unknown     the op that ends the gap had been launched before the GPU went idle (inter-kernel
              latency, a cross-stream or event dependency: the host was not late), or the trace has
              no host events (GPU-only). Checked first: such a gap is never blamed on the host.
              Likewise the end of a host-late gap, from the moment its op was issued (the launch
              call returned), when the GPU then still idles over QUEUED_WAIT_US: it waits on a
              dependency, not on the host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import intervals as iv
from .tables import name_flags

LAUNCH_GAP_MAX_US = 100.0  # HTA's launch-delay cutoff; longer host-late gaps are "cpu"
SYNC_RELAUNCH_US = LAUNCH_GAP_MAX_US  # after a sync returns, this much idle is the drain's relaunch cost
QUEUED_WAIT_US = LAUNCH_GAP_MAX_US  # idle longer than this after the op was issued is a dependency wait

BUSY_PARTS = ("compute", "comm", "memcpy")
IDLE_PARTS = ("idle_dataloader", "idle_sync", "idle_launch", "idle_cpu", "idle_unknown")
PARTS = BUSY_PARTS + IDLE_PARTS

SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemset",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "hipMemcpyWithStream",
    "hipMemset",
    "hipCtxSynchronize",
}
_COMM = re.compile(
    r"nccl|rccl|cross_device_reduce|all_reduce|allreduce|all_gather|allgather|"
    r"reduce_scatter|alltoall|all_to_all|SendRecv",
    re.IGNORECASE,
)
_DATALOADER = re.compile(r"^enumerate\((DataLoader|DataPipe)\)#")


def is_comm_kernel(names: pd.Series) -> np.ndarray:
    return name_flags(names, _COMM.search)


def is_dataloader(names: pd.Series) -> np.ndarray:
    return name_flags(names, _DATALOADER.match)


@dataclass
class Timeline:
    device: int | None
    lo_us: float
    hi_us: float
    sets: dict = field(default_factory=dict)  # part -> interval set
    per_step: pd.DataFrame = None  # one row per step, *_us columns per part
    gaps: pd.DataFrame = None  # idle pieces: start_us, end_us, dur_us, cause

    def total(self, part: str) -> float:
        return iv.total(self.sets[part])


def build_timeline(tables, steps: pd.DataFrame, device: int | None) -> Timeline:
    lo = float(steps["start_us"].min())
    hi = float(steps["end_us"].max())
    tl = Timeline(device=device, lo_us=lo, hi_us=hi)
    # only the columns the timeline reads, as arrays: a filtered copy of the whole kernel table (twenty
    # columns) per selection would cost its full width per kernel at the analysis's peak
    k = _gpu_columns(tables.kernels, device)
    m = _gpu_columns(tables.memcpy, device)
    comm_mask = is_comm_kernel(tables.kernels["name"])[k["rows"]] if k["rows"].size else np.zeros(0, dtype=bool)
    kernels_all = iv.clip(iv.union(k["ts_us"], k["end_us"]), lo, hi)
    if comm_mask.any():
        compute = iv.clip(iv.union(k["ts_us"][~comm_mask], k["end_us"][~comm_mask]), lo, hi)
        comm_all = iv.clip(iv.union(k["ts_us"][comm_mask], k["end_us"][comm_mask]), lo, hi)
        comm = iv.subtract(comm_all, compute)
        del comm_all
    else:  # no collective: compute is every kernel (one set, not two copies of it)
        compute, comm = kernels_all, iv.EMPTY
    if m["rows"].size:
        copies = iv.clip(iv.union(m["ts_us"], m["end_us"]), lo, hi)
        mem = iv.subtract(copies, kernels_all)
        busy = iv.union(np.concatenate((kernels_all[0], copies[0])), np.concatenate((kernels_all[1], copies[1])))
        del copies
    else:
        mem, busy = iv.EMPTY, kernels_all
    gaps = iv.complement(busy, lo, hi)
    del busy, kernels_all

    idle = _classify_gaps(tables, gaps, k, m, lo, hi, device is not None)
    tl.sets = {"compute": compute, "comm": comm, "memcpy": mem, **idle}

    st = steps.reset_index(drop=True)
    out = {
        "step": st["step"].to_numpy(),
        "start_us": st["start_us"].to_numpy(),
        "end_us": st["end_us"].to_numpy(),
        "dur_us": st["dur_us"].to_numpy(),
    }
    for part in PARTS:
        out[f"{part}_us"] = iv.per_window(tl.sets[part], st["start_us"].to_numpy(), st["end_us"].to_numpy())
    tl.per_step = pd.DataFrame(out)

    tl.gaps = _gap_table(tl.sets)
    return tl


def _gpu_columns(df: pd.DataFrame, device: int | None) -> dict:
    """The timeline's columns of the kernel or memcpy table, on `device` (all rows when None), as arrays;
    "rows" are their positions in the table."""
    rows = np.flatnonzero(df["device"].to_numpy() == device) if device is not None else np.arange(len(df))
    whole = rows.size == len(df)
    out = {"rows": rows}
    for c in ("ts_us", "end_us", "launch_ts_us", "launch_dur_us"):
        a = df[c].to_numpy()
        out[c] = a if whole else a[rows]
    return out


def _gap_table(sets: dict) -> pd.DataFrame:
    """Every idle piece, sorted by start, with its cause as a category (one byte a piece, not a
    pointer to a string): the arrays are gathered once and the DataFrame takes them without a copy."""
    s = np.concatenate([sets[p][0] for p in IDLE_PARTS])
    e = np.concatenate([sets[p][1] for p in IDLE_PARTS])
    codes = np.repeat(np.arange(len(IDLE_PARTS), dtype=np.int8), [sets[p][0].size for p in IDLE_PARTS])
    order = np.argsort(s, kind="stable")  # ties keep IDLE_PARTS order, as the concatenation had it
    s, e, codes = s[order], e[order], codes[order]
    del order
    cause = pd.Categorical.from_codes(codes, categories=[p[5:] for p in IDLE_PARTS])
    return pd.DataFrame({"start_us": s, "end_us": e, "dur_us": e - s, "cause": cause}, copy=False)


def _classify_gaps(tables, gaps, k, m, lo, hi, has_gpu) -> dict:
    out = {p: iv.EMPTY for p in IDLE_PARTS}
    if gaps[0].size == 0:
        return out
    if not has_gpu:
        out["idle_unknown"] = gaps
        return out
    rt = tables.runtime
    if len(rt) == 0:  # no host events: nothing can explain the gaps
        out["idle_unknown"] = gaps
        return out
    # The GPU op that ends each gap, and when the host launched it. If it was launched before the GPU
    # went idle, the host was not late: the GPU waited on queued work (inter-kernel latency, a
    # cross-stream or event dependency), whatever the host was doing meanwhile.
    nk = k["ts_us"].size
    g_ts = np.concatenate((k["ts_us"], m["ts_us"])) if m["ts_us"].size else k["ts_us"]
    order = np.argsort(g_ts, kind="stable")
    nxt = np.searchsorted(g_ts[order], gaps[1] - 1e-6, side="left")
    has_next = nxt < g_ts.size
    del g_ts
    sel = order[nxt[has_next]]  # the GPU op that ends each gap (that has one), as a row of k then m
    del order

    def at_next(col: str) -> np.ndarray:
        out = np.full(gaps[0].size, np.nan)
        ink = sel < nk
        vals = np.empty(sel.size)
        vals[ink] = k[col][sel[ink]]
        vals[~ink] = m[col][sel[~ink] - nk]
        out[has_next] = vals
        return out

    launch = at_next("launch_ts_us")
    issued = launch + np.nan_to_num(at_next("launch_dur_us"))
    queued = ~np.isnan(launch) & (launch <= gaps[0])
    # The host was late, but once the op was issued the GPU sat idle longer than a launch takes: from
    # then on the GPU waited on a dependency (an event, another stream or process), not on the host.
    waited = ~queued & ~np.isnan(issued) & (gaps[1] - issued > QUEUED_WAIT_US) & (issued > gaps[0])
    w_start = issued[waited]
    out["idle_unknown"] = (
        np.concatenate((gaps[0][queued], w_start)),
        np.concatenate((gaps[1][queued], gaps[1][waited])),
    )
    order_u = np.argsort(out["idle_unknown"][0], kind="stable")
    out["idle_unknown"] = (out["idle_unknown"][0][order_u], out["idle_unknown"][1][order_u])
    rest_end = gaps[1].copy()
    rest_end[waited] = w_start
    rest = (gaps[0][~queued], rest_end[~queued])

    ops = tables.cpu_ops
    dl = ops[is_dataloader(ops["name"])] if len(ops) else ops
    dl_set = iv.union(dl["ts_us"], dl["end_us"]) if len(dl) else iv.EMPTY
    sync_rt = rt[rt["name"].isin(list(SYNC_CALLS))]
    sync_set = iv.union(sync_rt["ts_us"], sync_rt["end_us"] + SYNC_RELAUNCH_US) if len(sync_rt) else iv.EMPTY

    out["idle_dataloader"] = iv.intersect(rest, dl_set)
    rest = iv.subtract(rest, dl_set)
    if sync_set[0].size:
        out["idle_sync"] = iv.intersect(rest, sync_set)
        rest = iv.subtract(rest, sync_set)
    # what is left: the host was late launching the op that ended the gap
    dur = rest[1] - rest[0]
    is_launch = dur <= LAUNCH_GAP_MAX_US
    out["idle_launch"] = (rest[0][is_launch], rest[1][is_launch])
    out["idle_cpu"] = (rest[0][~is_launch], rest[1][~is_launch])
    return out
