"""The replay model: a dependency graph of host calls and GPU ops built from a Trace's tables, and its
discrete-event replay (Daydream-style; docs/whatif.md).

Owns the graph, the edges it infers and the replay. Must not judge (detectors do) and must not render.
Every array is indexed by node; transformations edit durations, gaps and edges, never the measured times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..facts.steps import in_steps_mask
from ..trace import intervals as iv
from ..trace.model import Trace
from ..trace.tables import name_flags

# A host call that can block until GPU work ends: synchronisation, copies (a copy to or from pageable memory
# and every non-async copy returns when the copy is done), frees (cudaFree synchronises the device).
_BLOCKING = re.compile(r"Synchroniz|Memcpy|Memset|Free")
# Calls that wait for every op launched before them, on every stream (cudaFree drains the device), whether
# or not the measured GPU was still busy when they ran.
_DEVICE_WIDE = re.compile(r"^(cuda|hip)(DeviceSynchronize|Free|FreeHost)$")
# A launch that took this long was held by the full launch queue (backpressure): it waited for the GPU.
LAUNCH_BACKPRESSURE_US = 50.0
# A thread that idled at least this long before a call may have been waiting for another thread.
CROSS_THREAD_MIN_GAP_US = 20.0
# A GPU op that started this much later than its launch and its stream allowed waited for another stream.
CROSS_STREAM_MIN_SLACK_US = 5.0

HOST, GPU = 0, 1


@dataclass
class Graph:
    """Host nodes (runtime calls and step markers, per thread) and GPU nodes (kernels, copies, per stream).

    Replayed: host start = max(thread predecessor end + gap, cross-thread predecessor end + xgap);
    host end = start + own, or for a wait max(start + own, awaited op end + residual);
    GPU start = max(launch start + latency, stream predecessor end, cross-stream predecessor end) + slack
    (latency where the launch bound the measured start, slack where a stream did: what no edge explains).
    """

    trace: Trace
    # host nodes
    h_ts: np.ndarray
    h_end: np.ndarray
    h_tid: np.ndarray
    h_name: np.ndarray  # object array of str ("" for markers)
    h_rt: np.ndarray  # row in trace.runtime, -1 for a step marker
    h_prev: np.ndarray  # same-thread predecessor node, -1 none
    h_gap: np.ndarray  # ts - predecessor end (measured; transformations shrink it)
    h_xprev: np.ndarray  # cross-thread predecessor node (binding when the thread idled), -1 none
    h_xgap: np.ndarray
    h_own: np.ndarray  # the call's own host cost
    h_wait: np.ndarray  # GPU node the call waited for, -1 none
    h_resid: np.ndarray  # time from the awaited op's end to the call's return
    # GPU nodes
    g_ts: np.ndarray
    g_end: np.ndarray
    g_dur: np.ndarray
    g_name: pd.Series
    g_kind: np.ndarray  # "kernel" | "memcpy"
    g_row: np.ndarray  # row in trace.kernels / trace.memcpy
    g_launch: np.ndarray  # host node of the launch, -1 none
    g_lat: np.ndarray  # start - launch start (when the launch binds)
    g_prev: np.ndarray  # stream predecessor, -1 none
    g_xprev: np.ndarray  # cross-stream predecessor (inferred wait), -1 none
    g_slack: np.ndarray  # start - max(every ready time), >= 0
    g_stream: np.ndarray
    g_device: np.ndarray
    markers: np.ndarray  # host node of each step start, then of the last step's end: n_steps + 1
    m_end: np.ndarray  # host node of each step's end (a step is measured from its start to its end)
    edges: "EdgeCounts" = field(default_factory=lambda: EdgeCounts())
    notes: list = field(default_factory=list)
    time_scale: float = 1.0  # the graph's time unit against the trace's (a k times larger batch: 1/k per sample)
    # facts derived from the measured structure alone (the arrays not in MUTABLE, which no transformation
    # writes): computed once, shared by a graph's copies (structural())
    _shared: dict = field(default_factory=dict, repr=False)

    # the arrays transformations write in place; the others (the measured structure: times, edges, names)
    # are shared between a graph and its copies, read-only, so a write to one of them fails at once
    # instead of changing the measured graph (copying every array was 0.44 s of a 1 GB trace's analysis)
    MUTABLE = ("g_dur", "g_lat", "g_slack", "g_xprev", "h_gap", "h_own", "h_wait", "h_xgap")

    def structural(self, key, compute):
        """A fact of the measured structure, computed once for the graph and all its copies. Keyed also by
        the structure's arrays themselves: a copy given a new one (a transformation that rebuilt an edge
        array) computes its own."""
        sig = tuple(id(v) for k, v in self.__dict__.items() if isinstance(v, np.ndarray) and k not in self.MUTABLE)
        full = (key, sig)
        if full not in self._shared:
            self._shared[full] = compute()
        return self._shared[full]

    def copy(self) -> "Graph":
        kw = dict(self.__dict__)
        for k, v in kw.items():
            if isinstance(v, np.ndarray):
                if k in self.MUTABLE:
                    kw[k] = v.copy()
                else:
                    v.flags.writeable = False
        kw["notes"] = list(self.notes)
        return Graph(**kw)

    # --- what transformations use ----------------------------------------------------------------
    def host_gap_span(self) -> tuple[np.ndarray, np.ndarray]:
        """Each host node's measured preceding gap on its thread, as [start, end) intervals."""
        prev = self.h_prev
        s = np.where(prev >= 0, self.h_end[np.maximum(prev, 0)], self.h_ts)
        return np.minimum(s, self.h_ts), self.h_ts

    def remove_host_time(self, starts, ends, factor: float = 1.0) -> float:
        """Take `factor` of the host time inside the interval set out of the gaps before the host nodes
        (the host work there no longer runs). Returns the host time removed."""
        s, e = iv.union(np.asarray(starts, float), np.asarray(ends, float))
        if not len(s):
            return 0.0

        def cover():  # sparse: the nodes whose measured gap meets the set, and how much of it
            a, b = self.host_gap_span()
            inside = _covered(s, e, b) - _covered(s, e, a)
            at = np.flatnonzero(inside > 0)
            return at, inside[at]

        at, inside = self.structural(("gap cover", s.tobytes(), e.tobytes()), cover)
        cut = np.zeros(len(self.h_gap))
        cut[at] = np.minimum(inside * max(factor, 0.0), np.maximum(self.h_gap[at], 0.0))
        self.h_gap = self.h_gap - cut
        self.h_xgap = np.maximum(self.h_xgap - cut, 0.0)
        return float(cut.sum())

    def remove_claimed_host_time(self, finding, part: str) -> float:
        """Remove the host work during the GPU idle time a finding claims in one timeline part."""
        if finding is None or part not in finding.claim_sets:
            return 0.0
        st, en, factor = finding.claim_sets[part]
        return self.remove_host_time(st, en, factor)

    def host_in_steps(self) -> np.ndarray:
        """Host nodes inside the analysed window (read-only)."""

        def mask():
            st = self.trace.steps
            lo, hi = float(st["start_us"].min()), float(st["end_us"].max())
            return _frozen((self.h_ts >= lo) & (self.h_ts < hi))

        return self.structural("host in steps", mask)

    def gpu_in_steps(self) -> np.ndarray:
        """GPU nodes inside the analysed steps (read-only)."""
        return self.structural("gpu in steps", lambda: _frozen(in_steps_mask(self.trace, self.g_ts)))

    def launches_in_steps(self) -> np.ndarray:
        """The host nodes that launched a GPU op inside the analysed steps, sorted (read-only)."""

        def compute():
            hit = np.zeros(len(self.h_ts), dtype=bool)  # a table, not np.unique: a hash set is 5x slower here
            hit[self.g_launch[(self.g_launch >= 0) & self.gpu_in_steps()]] = True
            return _frozen(np.flatnonzero(hit))

        return self.structural("launches in steps", compute)

    def kernel_mask(self, rows: np.ndarray) -> np.ndarray:
        """GPU nodes that are the given rows of trace.kernels."""
        m = np.zeros(len(self.trace.kernels), dtype=bool)
        m[np.asarray(rows, dtype=np.int64)] = True
        return (self.g_kind == "kernel") & m[np.where(self.g_kind == "kernel", self.g_row, 0)]

    def remove_gpu(self, mask: np.ndarray) -> None:
        self.g_dur = np.where(mask, 0.0, self.g_dur)
        self.g_slack = np.where(mask, 0.0, self.g_slack)
        self.g_lat = np.where(mask, 0.0, self.g_lat)

    def remove_launches(self, gpu_mask: np.ndarray) -> None:
        """The host calls that launched these GPU ops no longer run (their cost and the gap before them)."""
        h = self.g_launch[gpu_mask & (self.g_launch >= 0)]
        self.h_own[h] = 0.0
        self.h_gap[h] = np.minimum(self.h_gap[h], 0.0)
        self.h_xgap[h] = 0.0

    # --- helpers of the cpu-offload, pageable-memcpy, exposed-communication, allocator-churn fixes ------
    def op_mask(self, kind: str, rows) -> np.ndarray:
        """GPU nodes that are the given rows of trace.kernels (kind "kernel") or trace.memcpy ("memcpy")."""
        table = self.trace.kernels if kind == "kernel" else self.trace.memcpy
        m = np.zeros(len(table) + 1, dtype=bool)
        m[np.asarray(rows, dtype=np.int64)] = True
        return (self.g_kind == kind) & m[np.where(self.g_kind == kind, self.g_row, len(table))]

    def host_call_mask(self, rt_rows) -> np.ndarray:
        """Host nodes that are the given rows of trace.runtime (outermost calls only)."""
        m = np.zeros(len(self.trace.runtime) + 1, dtype=bool)
        m[np.asarray(rt_rows, dtype=np.int64)] = True
        return m[np.where(self.h_rt >= 0, self.h_rt, len(self.trace.runtime))]

    def stop_waiting(self, host_mask: np.ndarray) -> None:
        """These host calls no longer block on the GPU (their own cost, the time after the op, stays)."""
        self.h_wait = np.where(host_mask, -1, self.h_wait)

    def drop_host_calls(self, host_mask: np.ndarray) -> None:
        """These host calls no longer run: no cost, no wait (the host work before them stays in the gap)."""
        self.h_own = np.where(host_mask, 0.0, self.h_own)
        self.h_wait = np.where(host_mask, -1, self.h_wait)

    # --- helpers of the eager-attention, padding-waste, launch-bound (batch) and unfused-optimizer fixes
    def kernel_nodes(self, rows: np.ndarray) -> np.ndarray:
        """The GPU node of each given row of trace.kernels (-1 where the row is not in the graph)."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.full(len(self.trace.kernels), -1, dtype=np.int64)
        isk = np.flatnonzero(self.g_kind == "kernel")
        at[self.g_row[isk]] = isk
        return at[rows] if len(rows) else np.zeros(0, dtype=np.int64)

    def drop_ops(self, gpu_mask: np.ndarray, keep_launches: np.ndarray | None = None) -> None:
        """These GPU ops no longer run, nor do the host calls that launched them (their cost and the gap
        before them), except the launches in `keep_launches` (host nodes another op still needs)."""
        gpu_mask = np.asarray(gpu_mask, dtype=bool)
        self.remove_gpu(gpu_mask)
        if keep_launches is not None and len(keep_launches):
            shared = np.zeros(len(self.h_ts), dtype=bool)
            shared[np.asarray(keep_launches, dtype=np.int64)] = True
            gpu_mask = gpu_mask & ~shared[np.maximum(self.g_launch, 0)]
        self.remove_launches(gpu_mask)
        h = self.g_launch[gpu_mask & (self.g_launch >= 0)]
        self.h_wait[h] = -1  # a launch that no longer runs cannot wait for a full queue

    def scale_gpu(self, gpu_mask: np.ndarray, factor) -> None:
        """Durations of these GPU ops times `factor` (a scalar or one value per node)."""
        self.g_dur = np.where(gpu_mask, self.g_dur * factor, self.g_dur)

    def scale_host(self, host_mask: np.ndarray, factor: float) -> None:
        """Host time of these host nodes (the gap before each, its own cost, a wait's residual) times factor."""
        for a in ("h_gap", "h_xgap", "h_own", "h_resid"):
            v = getattr(self, a)
            setattr(self, a, np.where(host_mask, np.maximum(v, 0.0) * factor, v))


@dataclass(frozen=True)
class EdgeCounts:
    """Where the graph's dependencies between streams and threads came from: recorded by the trace
    (CUPTI synchronization records, `cuda_sync`) or inferred from timing (the fallback)."""

    cross_stream_recorded: int = 0  # GPU op -> op of another stream, from a Stream Wait Event
    cross_stream_inferred: int = 0
    host_wait_recorded: int = 0  # host call -> the GPU op it waited for, from an Event/Stream/Context Sync
    host_wait_inferred: int = 0
    cross_thread_inferred: int = 0  # host call -> call of another thread (never recorded: timing only)
    stream_waits_complete: bool = False  # every stream-wait call has its record: no cross-stream guess
    contradicted: int = 0  # records whose ops' measured times contradict them (dropped, inferred instead)

    @property
    def recorded(self) -> int:
        return self.cross_stream_recorded + self.host_wait_recorded

    @property
    def inferred(self) -> int:
        return self.cross_stream_inferred + self.host_wait_inferred + self.cross_thread_inferred

    @property
    def recorded_share(self) -> float | None:
        n = self.recorded + self.inferred
        return self.recorded / n if n else None


# A runtime call that makes one stream wait for an event recorded on another (nothing runs on the host).
_STREAM_WAIT_CALL = re.compile(r"StreamWaitEvent")
# A host call that blocks until recorded GPU work is done (cudaEventQuery also gives an "Event Sync"
# record but returns at once).
_SYNC_CALL = re.compile(r"Synchroniz")
# Older Kineto writes whole microseconds: a record is contradicted by the measured times only beyond that.
RECORDED_TOL_US = 1.0


@dataclass
class _Recorded:
    g_dst: np.ndarray  # GPU node that waited
    g_src: np.ndarray  # the op of another stream it waited for
    h_node: np.ndarray  # host node of a blocking sync call
    h_src: np.ndarray  # the GPU op it waited for
    waits_complete: bool
    contradicted: int


def _recorded(trace: Trace, g: pd.DataFrame, g_ts, g_end, rt_to_h, h_name, h_ts, h_end) -> _Recorded:
    """The dependencies the trace's `cuda_sync` records name (docs/whatif.md, "Edges"). A record names
    the waiting stream or call by its correlation id and the awaited work by the cudaEventRecord call's
    correlation id and stream. Correlation ids grow with every runtime call of the process, so the
    awaited work is the last op of that stream enqueued before the record, and the waiting op is the
    first op of the waiting stream enqueued after the wait call."""
    none = np.zeros(0, dtype=np.int64)
    sy = getattr(trace, "sync_events", None)
    rt = trace.runtime
    if sy is None or not len(sy) or not len(g) or not len(rt):
        return _Recorded(none, none, none, none, False, 0)
    name = sy["name"].astype(str).to_numpy()
    s_dev, s_stream = sy["device"].to_numpy().astype(np.int64), sy["stream"].to_numpy().astype(np.int64)
    s_corr = sy["correlation"].to_numpy().astype(np.int64)
    w_stream = sy["wait_on_stream"].to_numpy().astype(np.int64)
    w_rec = sy["wait_record_corr"].to_numpy().astype(np.int64)
    has_rec = (w_stream >= 0) & (w_rec >= 0)

    # every stream-wait call of the trace has a record naming what it waits for: nothing to guess
    rt_corr = rt["correlation"].to_numpy().astype(np.int64)
    wait_calls = rt_corr[name_flags(rt["name"], lambda s: bool(_STREAM_WAIT_CALL.search(s)))]
    recorded_waits = s_corr[(name == "Stream Wait Event") & has_rec]
    complete = bool(np.isin(wait_calls, recorded_waits).all())

    dev = g["device"].to_numpy().astype(np.int64)
    corr = g["corr"].to_numpy().astype(np.int64)
    key = dev * (1 << 32) + g["stream"].to_numpy().astype(np.int64)
    order = np.lexsort((corr, key))
    order = order[corr[order] >= 0]
    ks, cs = key[order], corr[order]

    def on_stream(qdev, qstream, qcorr, after: bool) -> np.ndarray:
        """Per query: the last op of the stream enqueued before qcorr (after=False), or the first after."""
        out = np.full(len(qcorr), -1, dtype=np.int64)
        qkey = qdev * (1 << 32) + qstream
        for u in np.unique(qkey):
            lo, hi = np.searchsorted(ks, u, "left"), np.searchsorted(ks, u, "right")
            at = np.flatnonzero(qkey == u)
            if lo == hi:
                continue
            j = np.searchsorted(cs[lo:hi], qcorr[at], "right" if after else "left") - (0 if after else 1)
            ok = (j >= 0) & (j < hi - lo)
            out[at[ok]] = order[lo + j[ok]]
        return out

    # --- stream waits: op -> op
    sw = np.flatnonzero((name == "Stream Wait Event") & has_rec & (s_corr >= 0) & (w_stream != s_stream))
    src = on_stream(s_dev[sw], w_stream[sw], w_rec[sw], after=False)
    dst = on_stream(s_dev[sw], s_stream[sw], s_corr[sw], after=True)
    ok = (src >= 0) & (dst >= 0)
    src, dst = src[ok], dst[ok]
    bad = g_end[src] > g_ts[dst] + RECORDED_TOL_US  # the waiting op started before the awaited one ended
    contradicted = int(np.count_nonzero(bad))
    src, dst = src[~bad], dst[~bad]
    o = np.lexsort((g_end[src], dst))  # several waits before one op: the one that ended last binds
    last = np.concatenate([dst[o][1:] != dst[o][:-1], [True]]) if len(o) else np.zeros(0, bool)
    g_dst, g_src = dst[o][last], src[o][last]

    # --- host syncs: blocking call -> the op it waited for
    by_corr = pd.Series(np.arange(len(rt)), index=rt_corr).groupby(level=0).first()
    rows = by_corr.reindex(s_corr).fillna(-1).to_numpy().astype(np.int64)
    h = np.where(rows >= 0, rt_to_h[np.maximum(rows, 0)], -1)
    blocking = np.array([h_ >= 0 and bool(_SYNC_CALL.search(h_name[h_])) for h_ in h], dtype=bool)
    hs = np.full(len(sy), -1, dtype=np.int64)
    ev = np.flatnonzero(blocking & (name == "Event Sync") & has_rec)
    hs[ev] = on_stream(s_dev[ev], w_stream[ev], w_rec[ev], after=False)
    ss = np.flatnonzero(blocking & (name == "Stream Sync") & (s_stream >= 0))
    hs[ss] = on_stream(s_dev[ss], s_stream[ss], s_corr[ss], after=False)
    cx = np.flatnonzero(blocking & (name == "Context Sync"))
    for d in np.unique(s_dev[cx]):  # every op of the device enqueued before: the one that ends last binds
        at = cx[s_dev[cx] == d]
        od = np.flatnonzero((dev == d) & (corr >= 0))
        od = od[np.argsort(corr[od], kind="stable")]
        if not len(od):
            continue
        e = g_end[od]
        run = np.maximum.accumulate(np.where(e == np.maximum.accumulate(e), np.arange(len(e)), 0))
        j = np.searchsorted(corr[od], s_corr[at], "left") - 1
        okj = j >= 0
        hs[at[okj]] = od[run[j[okj]]]
    sel = np.flatnonzero(hs >= 0)
    hn, hsrc = h[sel], hs[sel]
    bad = (g_end[hsrc] > h_end[hn] + RECORDED_TOL_US) | (g_ts[hsrc] > h_end[hn])
    contradicted += int(np.count_nonzero(bad))
    hn, hsrc = hn[~bad], hsrc[~bad]
    o = np.lexsort((g_end[hsrc], hn))
    last = np.concatenate([hn[o][1:] != hn[o][:-1], [True]]) if len(o) else np.zeros(0, bool)
    return _Recorded(g_dst, g_src, hn[o][last], hsrc[o][last], complete, contradicted)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _covered(s: np.ndarray, e: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the (disjoint, sorted) interval set inside (-inf, x], for each x."""
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    i = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    j = np.maximum(i - 1, 0)
    part = np.where(i > 0, np.clip(x - s[j], 0.0, e[j] - s[j]), 0.0)
    return cum[j] + part if len(s) else np.zeros_like(x)


def _prev_in_group(keys: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For rows sorted by `order` within groups `keys`, each row's predecessor in its group (-1 first)."""
    prev = np.full(len(order), -1, dtype=np.int64)
    if len(order) > 1:
        same = keys[order[1:]] == keys[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def build(trace: Trace) -> Graph:
    """The graph of the whole trace (the analysed steps are read off the replay by their markers)."""
    notes: list[str] = []
    rt = trace.runtime
    dev = trace.timeline.device if trace.has_gpu else None
    # --- GPU nodes: kernels, then copies, of the analysed device
    parts = []
    for kind, t in (("kernel", trace.kernels), ("memcpy", trace.memcpy)):
        if not len(t):
            continue
        keep = np.ones(len(t), bool) if dev is None else t["device"].to_numpy() == dev
        rows = np.flatnonzero(keep)
        parts.append(
            pd.DataFrame(
                {
                    "ts": t["ts_us"].to_numpy()[rows],
                    "dur": t["dur_us"].to_numpy()[rows],
                    "stream": t["stream"].to_numpy()[rows],
                    "device": t["device"].to_numpy()[rows],
                    "launch_rt": t["launch_idx"].to_numpy()[rows],
                    "corr": t["correlation"].to_numpy()[rows],
                    "row": rows,
                    "kind": kind,
                    "name": t["name"].astype(str).to_numpy()[rows],
                }
            )
        )
    g = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(
            {
                "ts": [],
                "dur": [],
                "stream": [],
                "device": [],
                "launch_rt": [],
                "corr": [],
                "row": [],
                "kind": [],
                "name": [],
            }
        )
    )
    g = g.sort_values("ts", kind="stable").reset_index(drop=True)
    g_ts = g["ts"].to_numpy(float)
    g_dur = np.maximum(g["dur"].to_numpy(float), 0.0)
    g_end = g_ts + g_dur
    n_g = len(g)

    # --- host nodes: outermost runtime calls per thread, plus the step markers on the launching thread
    if len(rt):
        r_ts, r_end, r_tid = rt["ts_us"].to_numpy(float), rt["end_us"].to_numpy(float), rt["tid"].to_numpy()
        o = np.lexsort((-r_end, r_ts, r_tid))
        # a call inside another call of its thread (a driver call under a runtime call) is part of it
        # running max of the ends within each thread (exclusive of the row): rows are sorted by thread,
        # so one cumulative max over ends lifted by thread index x span keeps the threads apart
        ends = r_end[o]
        gid = np.concatenate([[0], np.cumsum(r_tid[o][1:] != r_tid[o][:-1])])
        lo = float(min(r_ts.min(), r_end.min()))
        span = float(r_end.max() - lo) + 1.0
        run = np.maximum.accumulate((ends - lo) + gid * span)
        prev_max = np.concatenate([[-np.inf], run[:-1]]) - gid * span + lo
        first = np.concatenate([[True], gid[1:] != gid[:-1]])
        prev_max[first] = -np.inf
        inner = (ends <= prev_max) & (r_ts[o] < prev_max)
        rows_rt = o[~inner]
    else:
        r_ts = r_end = r_tid = np.zeros(0)
        rows_rt = np.zeros(0, dtype=np.int64)
    st = trace.steps
    if len(rows_rt):
        tids, counts = np.unique(r_tid[rows_rt], return_counts=True)
        main_tid = tids[np.argmax(counts)]
    else:
        main_tid = -1
    mk = (
        np.unique(np.concatenate([st["start_us"].to_numpy(float), st["end_us"].to_numpy(float)]))
        if len(st)
        else np.zeros(0)
    )
    h = pd.DataFrame(
        {
            "ts": np.concatenate([r_ts[rows_rt], mk]),
            "end": np.concatenate([r_end[rows_rt], mk]),
            "tid": np.concatenate([r_tid[rows_rt], np.full(len(mk), main_tid)]),
            "rt": np.concatenate([rows_rt, np.full(len(mk), -1)]).astype(np.int64),
        }
    )
    h = h.sort_values(["tid", "ts", "end"], kind="stable").reset_index(drop=True)
    h_ts, h_end, h_tid, h_rt = (
        h["ts"].to_numpy(float),
        h["end"].to_numpy(float),
        h["tid"].to_numpy(),
        h["rt"].to_numpy(),
    )
    n_h = len(h)
    h_name = np.array([""] * n_h, dtype=object)
    if len(rt):
        names = rt["name"].astype(str).to_numpy()
        isrt = h_rt >= 0
        h_name[isrt] = names[h_rt[isrt]]
    order = np.arange(n_h)
    h_prev = _prev_in_group(h_tid, order)
    h_gap = np.where(h_prev >= 0, h_ts - h_end[np.maximum(h_prev, 0)], 0.0)
    # cross-thread predecessor: the call of another thread that ended last before this one started, when
    # this thread idled and that end is later than its own predecessor's (a hand-off between threads). A
    # thread's first call in the window idled since before it: the autograd engine's thread starts when
    # the main thread calls backward, a DataLoader's pin thread when a batch is ready; without the edge it
    # stays pinned at its measured time whatever the thread that started it does
    h_xprev = np.full(n_h, -1, dtype=np.int64)
    if n_h and len(np.unique(h_tid)) > 1:
        by_end = np.argsort(h_end, kind="stable")
        j = np.searchsorted(h_end[by_end], h_ts, side="right") - 1
        cand = np.where(j >= 0, by_end[np.maximum(j, 0)], -1)
        own_end = np.where(h_prev >= 0, h_end[np.maximum(h_prev, 0)], -np.inf)
        ok = (
            (cand >= 0)
            & (h_tid[np.maximum(cand, 0)] != h_tid)
            & ((h_gap >= CROSS_THREAD_MIN_GAP_US) | (h_prev < 0))
            & (h_end[np.maximum(cand, 0)] > own_end)
        )
        h_xprev[ok] = cand[ok]
    h_xgap = np.where(h_xprev >= 0, h_ts - h_end[np.maximum(h_xprev, 0)], 0.0)
    h_own = h_end - h_ts

    # --- launch edges
    rt_to_h = np.full(len(rt), -1, dtype=np.int64)
    if len(rt):
        rt_to_h[h_rt[h_rt >= 0]] = np.flatnonzero(h_rt >= 0)
        # an inner call (driver under runtime) launches for its outer call
        if len(rows_rt) < len(rt):
            outer_sorted = rows_rt[np.lexsort((r_ts[rows_rt], r_tid[rows_rt]))]
            for tid in np.unique(r_tid):
                oi = outer_sorted[r_tid[outer_sorted] == tid]
                ii = np.flatnonzero((r_tid == tid) & (rt_to_h < 0))
                if not len(oi) or not len(ii):
                    continue
                k = np.searchsorted(r_ts[oi], r_ts[ii], side="right") - 1
                ok = k >= 0
                rt_to_h[ii[ok]] = rt_to_h[oi[k[ok]]]
    lr = g["launch_rt"].to_numpy().astype(np.int64)
    g_launch = np.where(lr >= 0, rt_to_h[np.maximum(lr, 0)] if len(rt) else -1, -1)
    # --- stream order and inferred cross-stream waits
    skey = g["device"].to_numpy().astype(np.int64) * (1 << 32) + g["stream"].to_numpy().astype(np.int64)
    so = np.lexsort((g_ts, skey))
    g_prev = _prev_in_group(skey, so)
    launch_start = np.where(g_launch >= 0, h_ts[np.maximum(g_launch, 0)] if n_h else 0.0, -np.inf)
    prev_end = np.where(g_prev >= 0, g_end[np.maximum(g_prev, 0)], -np.inf)
    ready = np.maximum(launch_start, prev_end)
    rec = _recorded(trace, g, g_ts, g_end, rt_to_h, h_name, h_ts, h_end)
    g_xprev = np.full(n_g, -1, dtype=np.int64)
    if len(rec.g_dst):
        g_xprev[rec.g_dst] = rec.g_src
        ready[rec.g_dst] = np.maximum(ready[rec.g_dst], g_end[rec.g_src])
    if n_g and not rec.waits_complete:
        by_end = np.argsort(g_end, kind="stable")
        j = np.searchsorted(g_end[by_end], g_ts, side="right") - 1
        cand = np.where(j >= 0, by_end[np.maximum(j, 0)], -1)
        c = np.maximum(cand, 0)
        ok = (
            (cand >= 0)
            & (g_xprev < 0)
            & (skey[c] != skey)
            & (g_ts - ready >= CROSS_STREAM_MIN_SLACK_US)
            & (g_end[c] > ready)
        )
        g_xprev[ok] = cand[ok]
        inferred_xs = int(np.count_nonzero(ok))
        ready = np.where(ok, np.maximum(ready, g_end[c]), ready)
    else:
        inferred_xs = 0
    # what no edge explains: the launch latency when the launch binds, ~0 when the stream does
    g_slack = np.where(np.isfinite(ready), np.maximum(g_ts - ready, 0.0), 0.0)
    # where the launch bound the start, that time is launch latency: it belongs to the launch edge, so an
    # op whose stream binds after a fix does not wait for it again (the queue runs ahead of the GPU)
    launch_binds = (g_launch >= 0) & (launch_start >= ready)
    g_lat = np.where(launch_binds, g_slack, 0.0)
    g_slack = np.where(launch_binds, 0.0, g_slack)

    # --- host waits: a blocking call waits for the GPU op that ended last before it returned
    h_wait = np.full(n_h, -1, dtype=np.int64)
    h_resid = np.zeros(n_h)
    if n_h and n_g:
        blocking = np.zeros(n_h, bool)
        device_wide = np.zeros(n_h, bool)
        isrt = h_rt >= 0
        if isrt.any():
            # per distinct name of the runtime table (its name column), then per node: what h_name holds
            nm = rt["name"].astype(str) if not isinstance(rt["name"].dtype, pd.CategoricalDtype) else rt["name"]
            rows = h_rt[isrt]
            blk = name_flags(nm, lambda s: bool(_BLOCKING.search(s)))[rows]
            launch_long = name_flags(nm, lambda s: "Launch" in s)[rows] & (h_own[isrt] >= LAUNCH_BACKPRESSURE_US)
            blocking[isrt] = blk | launch_long
            device_wide[isrt] = name_flags(nm, lambda s: bool(_DEVICE_WIDE.match(s)))[rows]
        by_end = np.argsort(g_end, kind="stable")
        j = np.searchsorted(g_end[by_end], h_end, side="right") - 1
        cand = np.where(j >= 0, by_end[np.maximum(j, 0)], -1)
        c = np.maximum(cand, 0)
        ok = blocking & (cand >= 0) & (g_end[c] >= h_ts) & (g_ts[c] <= h_end)
        ok[rec.h_node] = False  # a recorded wait replaces the guess
        h_wait[ok] = cand[ok]
        h_resid = np.where(ok, h_end - g_end[c], 0.0)
        # a device-wide call on an idle GPU did not wait, but it will once a transformation moves the GPU
        # work later: its edge goes to the op that ended last before it, with no residual
        idle = device_wide & ~ok & (cand >= 0) & (h_wait < 0)
        idle[rec.h_node] = False
        h_wait[idle] = cand[idle]
        inferred_hw = int(np.count_nonzero(ok | idle))
        if len(rec.h_node):
            h_wait[rec.h_node] = rec.h_src
            # a call that returned after the awaited op ended waited for it: the rest is its residual;
            # one whose op was already done did not wait (it may once a transformation moves the op later)
            waited = g_end[rec.h_src] >= h_ts[rec.h_node]
            h_resid[rec.h_node] = np.where(waited, h_end[rec.h_node] - g_end[rec.h_src], 0.0)
            ok[rec.h_node] = waited
        h_own = np.where(ok, np.minimum(h_own, np.maximum(h_resid, 0.0)), h_own)
    else:
        inferred_hw = 0

    markers = m_end = np.zeros(0, dtype=np.int64)
    if len(mk):
        ism = h_rt < 0
        pos = {float(t): i for t, i in zip(h_ts[ism], np.flatnonzero(ism))}
        bounds = list(st["start_us"].to_numpy(float)) + [float(st["end_us"].iloc[-1])]
        markers = np.array([pos[float(b)] for b in bounds], dtype=np.int64)
        m_end = np.array([pos[float(b)] for b in st["end_us"].to_numpy(float)], dtype=np.int64)
        # the analysed window starts where it was measured to start: a fix shortens the steps, not the time
        # before them. Chained to the work before it, the first marker would start earlier when a fix
        # speeds up that work (a sync before the window on a faster kernel), while a later step's end stays
        # pinned by its own waits: that step would then read longer by as much.
        h_prev[markers[0]] = -1
        h_xprev[markers[0]] = -1
    return Graph(
        trace=trace,
        h_ts=h_ts,
        h_end=h_end,
        h_tid=h_tid,
        h_name=h_name,
        h_rt=h_rt,
        h_prev=h_prev,
        h_gap=h_gap,
        h_xprev=h_xprev,
        h_xgap=h_xgap,
        h_own=h_own,
        h_wait=h_wait,
        h_resid=h_resid,
        g_ts=g_ts,
        g_end=g_end,
        g_dur=g_dur,
        g_name=g["name"],
        g_kind=g["kind"].to_numpy(),
        g_row=g["row"].to_numpy().astype(np.int64),
        g_launch=g_launch,
        g_lat=g_lat,
        g_prev=g_prev,
        g_xprev=g_xprev,
        g_slack=g_slack,
        g_stream=g["stream"].to_numpy(),
        g_device=g["device"].to_numpy(),
        markers=markers,
        m_end=m_end,
        edges=EdgeCounts(
            cross_stream_recorded=len(rec.g_dst),
            cross_stream_inferred=inferred_xs,
            host_wait_recorded=len(rec.h_node),
            host_wait_inferred=inferred_hw,
            cross_thread_inferred=int(np.count_nonzero(h_xprev >= 0)),
            stream_waits_complete=rec.waits_complete,
            contradicted=rec.contradicted,
        ),
        notes=[n for n in notes if n],
    )
