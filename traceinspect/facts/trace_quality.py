"""Trace quality: what this trace can and cannot show, checked before the detectors judge anything.

Owns the checks (graph replays and unrecorded launches, missing activity, warm-up, too few steps, clock
and ordering), their documented thresholds (docs/trace-quality.md), and the "blind" idle time the
detectors must not claim (facts/claims.py subtracts it). Returns plain rows; analyze.py types them.
Renders nothing and changes no table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..trace import intervals as iv
from ..trace.model import Trace
from ..trace.tables import name_flags
from .device import primary_kernels
from .host import launch_rows
from .profiler_overhead import profiler_overhead
from ..sections import QualityCheck, py
from .steps import step_kernels, step_set

# --- thresholds (each with its physical reason; docs/trace-quality.md gives the evidence) -------------

# A graph replay is one cudaGraphLaunch/hipGraphLaunch; the GPU then runs the graph's kernels with no
# host call per kernel, and Kineto stamps every one of them with the graph launch's correlation id. Any
# replay share is reported; this share of the analysed kernel time makes the check "limited".
GRAPH_SHARE_MIN_FRAC = 0.01
# Kernels whose correlation id matches no runtime call, in a trace that has runtime calls: their launch
# was not recorded (CUPTI/roctracer buffers dropped it, or it came from another process). Above this
# share of kernel time the gaps before them cannot be attributed and the check is "limited"; above
# UNLAUNCHED_POOR_FRAC most of the GPU work has no host side and the check is "poor".
UNLAUNCHED_MIN_FRAC = 0.01
UNLAUNCHED_POOR_FRAC = 0.5
# A stream runs its ops in order. When the first recorded op of a stream starts this long after its
# launch call returned, with nothing recorded before it on that stream, the stream was busy with (or
# waiting on) work the trace does not hold: queued before the session started, or another process's.
# Launch latency is 5-50 us on CUDA and ROCm; 1 ms is twenty times the slowest.
QUEUE_WAIT_MIN_US = 1000.0
# ... and the idle time inside such waits must cover 1% of the window to limit the report (below that it
# moves no figure the report shows by more than its own rounding; it is still counted)
QUEUE_WAIT_MIN_FRAC = 0.01
# A training step launches the same kernels every iteration; a first step with fewer than half the
# median kernel count of the others lost kernels at session start (Kineto's known behaviour: activity
# is recorded only once the CUPTI/roctracer buffers are enabled, part-way through the first step).
FIRST_STEP_MIN_FRAC = 0.5
# Warm-up: a step this much longer than the median of the others, or whose kernel count differs from it
# by this fraction, with allocator growth (cudaMalloc/hipMalloc: the caching allocator asks the driver
# only while its pools grow) or autotuning (cudnnFind*, benchmark kernels) inside it.
WARMUP_DUR_RATIO = 1.5
WARMUP_COUNT_FRAC = 0.25
MIN_STEPS_FOR_OUTLIERS = 3  # an outlier needs at least two others to be compared with
# Clock and ordering: a kernel cannot start before the runtime call that enqueued it: one that does
# means the GPU timestamps were converted to the host clock with an error; past 1% of kernels the
# time-based claims carry a warning, past 10% the trace's gaps are not trustworthy ("poor"). Kernels
# overlapping their predecessor on one stream are counted but not judged: programmatic dependent launch
# (sm90+) lets a kernel start before the previous one on its stream ends.
ORDER_TOL_US = 0.01  # timestamps are rounded to the nanosecond (3 decimals of us)
CLOCK_LIMITED_FRAC = 0.01
CLOCK_POOR_FRAC = 0.10
# GPU time outside every ProfilerStep span is not analysed. The GPU trails the host by its queue depth,
# so the last step's tail legitimately runs after its span ends; more than 10% of kernel time outside
# the steps means a part of the capture is not what the report judges.
OUTSIDE_MAX_FRAC = 0.10
# A queue wait covering at least half of the window makes the trace "poor": most of what it shows is the
# GPU waiting on something it does not show.
POOR_WINDOW_FRAC = 0.5

# Profiler overhead (facts/profiler_overhead.py): the host time the profiler's optional settings add. At
# 3% of the analysed window the estimate alone reaches host-bound's default claim (min_frac): the host-side
# figures of such a trace may be the profiler's own work, so the check is "limited".
OVERHEAD_LIMITED_FRAC = 0.03

SCHEDULE = "torch.profiler.schedule(wait=1, warmup=1, active=3)"

_MALLOC = re.compile(r"^(cuda|hip)Malloc|^cuMemAlloc|^cuMemCreate|^hipMemCreate")
_AUTOTUNE = re.compile(r"cudnnFind|miopenFind|FindConvolution|AlgoGetHeuristic|[Bb]enchmark|[Aa]utotun")
_GRAPH = {"cudaGraphLaunch", "hipGraphLaunch"}

# labels of the idle time the trace cannot attribute (the account names it instead of "unexplained")
REPLAY_LABEL = "inside graph replays (no per-kernel launches recorded)"
UNLAUNCHED_LABEL = "before kernels with no recorded launch call"
QUEUE_LABEL = "GPU busy with or waiting on work not in the trace (queued before the capture started)"

LABEL_CHECK = {REPLAY_LABEL: "graph-replays", UNLAUNCHED_LABEL: "graph-replays", QUEUE_LABEL: "missing-activity"}

STATUS_ORDER = {"ok": 0, "limited": 1, "poor": 2}


@dataclass
class Quality:
    """The checks' rows (sections.QualityCheck), the overall status and the blind idle sets."""

    status: str = "good"
    line: str = "Trace quality: good"
    checks: list = field(default_factory=list)
    blind: dict = field(default_factory=dict)  # label -> interval set (inside the analysed steps)
    lower_confidence: str = ""  # non-empty: the reason every time-based finding's confidence is lowered


def _fmt(us: float) -> str:
    return f"{us / 1e6:.2f} s" if us >= 1e6 else f"{us / 1e3:.1f} ms" if us >= 1e3 else f"{us:.0f} us"


def _row(
    check: str, status: str, short: str, summary: str, effect: str, threshold: str, *, named=None, **values
) -> QualityCheck:
    """One check's row of the report; `named`: the steps it names (warm-up, dropped kernels)."""
    return QualityCheck(
        check=check,
        status=status,
        short=short,
        summary=summary,
        effect=effect,
        threshold=threshold,
        values={k: py(v) for k, v in values.items() if v is not None},
        **({"steps": [int(x) for x in named]} if named is not None else {}),
    )


def quality(trace: Trace) -> Quality:
    """The trace-quality checks of the analysed steps (computed once per trace and step selection)."""
    return trace.memo("facts: trace quality", lambda: _quality(trace))


def blind(trace: Trace) -> iv.Set:
    """The idle time no detector may claim: inside graph replays, before unlaunched kernels, queue waits."""
    return _union(quality(trace).blind)


def _union(sets: dict) -> iv.Set:
    if not sets:
        return iv.EMPTY
    s = np.concatenate([b[0] for b in sets.values()])
    e = np.concatenate([b[1] for b in sets.values()])
    return iv.union(s, e)


def _quality(trace: Trace) -> Quality:
    q = Quality()
    if not len(trace.steps) or not (trace.has_gpu or trace.has_cpu):
        q.status, q.line = "good", "Trace quality: nothing to check (no steps)"
        return q
    win = float(trace.steps["dur_us"].sum())
    if trace.has_gpu:
        q.checks.append(_graph_replays(trace, q, win))
        q.checks.append(_missing_activity(trace, q, win))
    q.checks.append(_warm_up(trace))
    q.checks.append(_too_few_steps(trace))
    if trace.has_gpu:
        q.checks.append(_clock_order(trace, q))
    q.checks.append(_profiler_overhead(trace, win))
    worst = max((STATUS_ORDER[c.status] for c in q.checks), default=0)
    q.status = ("good", "limited", "poor")[worst]
    bad = [c.short for c in q.checks if c.status != "ok"]
    q.line = "Trace quality: " + q.status + (": " + "; ".join(bad) if bad else "")
    return q


def _graph_replays(trace: Trace, q: Quality, win: float) -> QualityCheck:
    k = step_kernels(trace)
    rt = trace.runtime
    li = k["launch_idx"].to_numpy() if len(k) else np.zeros(0, dtype=np.int64)
    dur = k["dur_us"].to_numpy() if len(k) else np.zeros(0)
    total = float(dur.sum())
    launched_by = rt["name"].astype(str).to_numpy()[np.maximum(li, 0)] if len(rt) and len(li) else np.array([])
    in_graph = (li >= 0) & np.isin(launched_by, list(_GRAPH)) if len(launched_by) else np.zeros(len(k), dtype=bool)
    graph_calls = int(name_flags(rt["name"], _GRAPH).sum()) if len(rt) else 0
    unlaunched = (li < 0) if len(rt) else np.zeros(len(k), dtype=bool)
    g_share = float(dur[in_graph].sum()) / total if total else 0.0
    u_share = float(dur[unlaunched].sum()) / total if total else 0.0
    rocm = trace.device is not None and trace.device.is_rocm
    kind = "HIP-graph" if rocm else "CUDA-graph"
    steps = step_set(trace)
    if in_graph.any():
        # one replay: from the first to the last kernel carrying its launch's correlation id
        kg = k[in_graph]
        span = kg.groupby("correlation", observed=True).agg(lo=("ts_us", "min"), hi=("end_us", "max"))
        q.blind[REPLAY_LABEL] = iv.intersect(iv.union(span["lo"].to_numpy(), span["hi"].to_numpy()), steps)
    if unlaunched.any():
        q.blind[UNLAUNCHED_LABEL] = _gaps_before(trace, k[unlaunched]["ts_us"].to_numpy(), steps)
    if len(k) and not len(rt):
        status, short = "limited", "no CUDA/HIP runtime events: no kernel's launch is recorded"
        summary = (
            f"the trace has {len(k)} kernels and no runtime call at all (a GPU-only capture): launch and "
            "host gaps cannot be seen"
        )
    elif g_share >= GRAPH_SHARE_MIN_FRAC or u_share >= UNLAUNCHED_MIN_FRAC:
        status = "poor" if u_share >= UNLAUNCHED_POOR_FRAC else "limited"
        parts = []
        if g_share >= GRAPH_SHARE_MIN_FRAC:
            parts.append(f"{100 * g_share:.0f}% of GPU kernel time is in {kind} replays")
        if u_share >= UNLAUNCHED_MIN_FRAC:
            parts.append(f"{100 * u_share:.0f}% is in kernels with no recorded launch call")
        short = "; ".join(parts) + "; launch and host gaps inside them are not visible"
        rc = rt["correlation"].to_numpy()
        first = rc[rc >= 0].min() if (rc >= 0).any() else None
        early = int((k["correlation"].to_numpy()[unlaunched] < first).sum()) if first is not None else 0
        summary = (
            f"{int(in_graph.sum())} of {len(k)} kernels ran inside {graph_calls} graph launch call(s) "
            f"({100 * g_share:.1f}% of kernel time); {int(unlaunched.sum())} kernels "
            f"({100 * u_share:.1f}% of kernel time) have no correlated runtime call"
            + (
                f", {early} of them with a correlation id below the first recorded runtime call's (host "
                "activity not recorded at session start)"
                if early
                else ""
            )
        )
    else:
        status, short = "ok", ""
        summary = f"every kernel has its own launch call ({len(k)} kernels, {graph_calls} graph launches)"
    return _row(
        "graph-replays",
        status,
        short,
        summary,
        effect=(
            "launch-bound and host-bound claim no idle time inside graph replays or before unlaunched kernels; "
            "the account names that idle time instead of calling it unexplained"
        ),
        threshold=(
            f"{100 * GRAPH_SHARE_MIN_FRAC:g}% of kernel time in graph replays or {100 * UNLAUNCHED_MIN_FRAC:g}% "
            f"in unlaunched kernels: limited; {100 * UNLAUNCHED_POOR_FRAC:g}% unlaunched: poor"
        ),
        kernels=len(k),
        graph_launches=graph_calls,
        graph_kernels=int(in_graph.sum()),
        graph_kernel_frac=g_share,
        unlaunched_kernels=int(unlaunched.sum()),
        unlaunched_kernel_frac=u_share,
        replay_window_us=iv.total(q.blind.get(REPLAY_LABEL, iv.EMPTY)),
    )


def _gaps_before(trace: Trace, starts: np.ndarray, steps: iv.Set) -> iv.Set:
    """The timeline's idle gaps that end where one of `starts` begins (the wait before those kernels)."""
    g = trace.timeline.gaps
    if g is None or not len(g) or not len(starts):
        return iv.EMPTY
    ends = g["end_us"].to_numpy()
    hit = np.isin(np.round(ends, 3), np.round(starts, 3))
    return iv.intersect(iv.union(g["start_us"].to_numpy()[hit], ends[hit]), steps)


def _per_step(ts: np.ndarray, s0: np.ndarray, s1: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """How many of the timestamps `ts` (those where `where` is True) fall in each step [s0, s1) (steps
    sorted and not overlapping, as in_steps_mask reads them)."""
    i = np.searchsorted(s0, ts, side="right") - 1
    ok = (i >= 0) & (ts < s1[np.maximum(i, 0)]) if len(s0) else np.zeros(len(ts), dtype=bool)
    if where is not None:
        ok &= where
    return np.bincount(i[ok], minlength=len(s0))


def _missing_activity(trace: Trace, q: Quality, win: float) -> QualityCheck:
    k = step_kernels(trace)
    st = trace.steps
    s0, s1 = st["start_us"].to_numpy(), st["end_us"].to_numpy()
    rt = trace.runtime
    launches = launch_rows(rt) if len(rt) else rt
    if len(launches):
        # the correlation ids of every GPU op (np.isin counts integers in a table when their range is small)
        gpu_corr = np.concatenate((trace.kernels["correlation"].to_numpy(), trace.memcpy["correlation"].to_numpy()))
        lc = launches["correlation"].to_numpy()
        no_kernel = (lc >= 0) & ~np.isin(lc, gpu_corr)
        lts = launches["ts_us"].to_numpy()
    else:
        no_kernel, lts = np.zeros(0, dtype=bool), np.zeros(0)
    kts = k["ts_us"].to_numpy() if len(k) else np.zeros(0)
    unl = (k["launch_idx"].to_numpy() < 0) if len(k) and len(rt) else np.zeros(len(kts), dtype=bool)
    n_k, n_unl, n_lost = _per_step(kts, s0, s1), _per_step(kts, s0, s1, unl), _per_step(lts, s0, s1, no_kernel)
    per = [(int(st["step"].iloc[i]), int(n_k[i]), int(n_unl[i]), int(n_lost[i])) for i in range(len(st))]
    counts = n_k.astype(float)
    dropped_first = len(per) >= MIN_STEPS_FOR_OUTLIERS and counts[0] < FIRST_STEP_MIN_FRAC * float(
        np.median(counts[1:])
    )
    # queue waits: the first recorded op of each stream, started long after its launch returned
    waits = _queue_waits(trace)
    if waits[0].size:
        q.blind[QUEUE_LABEL] = iv.intersect(waits, step_set(trace))
    wait_us = iv.total(q.blind.get(QUEUE_LABEL, iv.EMPTY))
    notes, status = [], "ok"
    d = st["dur_us"].to_numpy()
    med_all = float(np.median(d))
    med_without = float(np.median(d[1:])) if dropped_first else None
    if dropped_first:
        status = "limited"
        notes.append(
            f"step {per[0][0]} has {per[0][1]} kernels against a median of {np.median(counts[1:]):.0f} in the "
            f"others: kernels dropped at session start; median step {_fmt(med_all)} with it, "
            f"{_fmt(med_without)} without (analyse with --steps 1: to exclude it)"
        )
    if win and wait_us / win >= QUEUE_WAIT_MIN_FRAC:
        status = "poor" if wait_us / win >= POOR_WINDOW_FRAC else "limited"
        notes.append(
            f"{_fmt(wait_us)} ({100 * wait_us / win:.0f}% of the window) the GPU waits with work queued on a "
            "stream that recorded nothing before it: work not in the trace"
        )
    lost_launch = sum(p[3] for p in per)
    lost_kernel = sum(p[2] for p in per)
    if status == "ok":
        summary = (
            f"{lost_kernel} kernels without a launch call, {lost_launch} launch calls without a kernel in the "
            f"analysed steps; GPU idle behind work not in the trace: {_fmt(wait_us)}"
        )
    else:
        summary = "; ".join(notes)
    affected = [p[0] for p in per if p[2] or p[3]] + ([per[0][0]] if dropped_first else [])
    return _row(
        "missing-activity",
        status,
        "; ".join(notes),
        summary,
        effect=(
            "the queue-wait time is named in the account, never claimed by launch-bound or host-bound; a first "
            "step with dropped kernels is named with the median step with and without it"
        ),
        threshold=(
            f"first step under {100 * FIRST_STEP_MIN_FRAC:g}% of the others' median kernel count; a stream's "
            f"first op starting more than {QUEUE_WAIT_MIN_US / 1e3:g} ms after its launch, its idle time over "
            f"{100 * QUEUE_WAIT_MIN_FRAC:g}% of the window ({100 * POOR_WINDOW_FRAC:g}%: poor)"
        ),
        kernels_without_launch=lost_kernel,
        launches_without_kernel=lost_launch,
        queue_wait_us=wait_us,
        queue_wait_frac=wait_us / win if win else 0.0,
        median_step_us=med_all,
        median_step_without_first_us=med_without,
        affected_steps=len(set(affected)),
        named=sorted(set(affected)),
    )


def _queue_waits(trace: Trace) -> iv.Set:
    ops = [t for t in (trace.kernels, trace.memcpy) if len(t)]
    if not ops:
        return iv.EMPTY
    dev = trace.timeline.device
    lo, hi = [], []
    for t in ops:
        t = t[t["device"].to_numpy() == dev] if dev is not None else t
        if not len(t):
            continue
        first = t.sort_values("ts_us", kind="stable").drop_duplicates("stream", keep="first")
        for r in first.itertuples(index=False):
            if np.isnan(r.launch_ts_us):
                continue
            issued = r.launch_ts_us + (0.0 if np.isnan(r.launch_dur_us) else r.launch_dur_us)
            if r.ts_us - issued > QUEUE_WAIT_MIN_US:
                lo.append(issued)
                hi.append(r.ts_us)
    if not lo:
        return iv.EMPTY
    # only the GPU idle time inside those waits is unattributable (other streams may have run)
    tl = trace.timeline
    idle = iv.union(
        np.concatenate([tl.sets[p][0] for p in tl.sets if p.startswith("idle_")]),
        np.concatenate([tl.sets[p][1] for p in tl.sets if p.startswith("idle_")]),
    )
    return iv.intersect(iv.union(np.array(lo), np.array(hi)), idle)


def _warm_up(trace: Trace) -> QualityCheck:
    st = trace.steps
    n = len(st)
    thr = (
        f"{MIN_STEPS_FOR_OUTLIERS}+ steps; a step over {WARMUP_DUR_RATIO:g}x the others' median duration or "
        f"{100 * WARMUP_COUNT_FRAC:g}% off their kernel count, with allocator growth or autotuning inside it"
    )
    eff = "names the steps and the median step with and without them; recommends " + SCHEDULE
    if n < MIN_STEPS_FOR_OUTLIERS:
        return _row("warm-up", "ok", "", f"{n} step(s): too few to tell a warm-up step from the others", eff, thr)
    d = st["dur_us"].to_numpy()
    s0, s1 = st["start_us"].to_numpy(), st["end_us"].to_numpy()
    kts = trace.kernels["ts_us"].to_numpy()
    counts = _per_step(kts, s0, s1).astype(float)
    hosts = [t for t in (trace.runtime, trace.cpu_ops) if len(t)]
    found = []
    for i in range(n):
        others = np.delete(np.arange(n), i)
        md, mc = float(np.median(d[others])), float(np.median(counts[others]))
        # warm-up adds work (autotuning runs candidate kernels, the allocator calls the driver); a step with
        # fewer kernels is missing-activity's (dropped kernels), not a warm-up
        far = d[i] > WARMUP_DUR_RATIO * md or (mc > 0 and counts[i] > (1 + WARMUP_COUNT_FRAC) * mc)
        if not far:
            continue
        mallocs = tunes = 0
        for t in hosts:
            inside = t[(t["ts_us"].to_numpy() >= s0[i]) & (t["ts_us"].to_numpy() < s1[i])]
            if len(inside):
                mallocs += int(name_flags(inside["name"], lambda x: _MALLOC.search(x) is not None).sum())
                tunes += int(name_flags(inside["name"], lambda x: _AUTOTUNE.search(x) is not None).sum())
        if len(trace.kernels):
            inside = trace.kernels[(kts >= s0[i]) & (kts < s1[i])]
            tunes += int(name_flags(inside["name"], lambda x: _AUTOTUNE.search(x) is not None).sum())
        if mallocs or tunes:
            found.append((i, d[i] / md if md else 0.0, counts[i], mc, mallocs, tunes))
    if not found:
        return _row("warm-up", "ok", "", f"no warm-up step among {n} steps", eff, thr)
    keep = np.delete(np.arange(n), [f[0] for f in found])
    med_all, med_kept = float(np.median(d)), float(np.median(d[keep])) if len(keep) else None
    names = [int(st["step"].iloc[f[0]]) for f in found]
    what = "; ".join(
        f"step {int(st['step'].iloc[i])}: {ratio:.1f}x the others' median, {c:.0f} kernels vs {mc:.0f}, "
        f"{m} allocator call(s), {tn} autotuning event(s)"
        for i, ratio, c, mc, m, tn in found
    )
    lead = len(found) if [f[0] for f in found] == list(range(len(found))) else 0  # warm-ups that open the window
    short = (
        f"{len(found)} warm-up step(s) in the window (median step {_fmt(med_all)} with, "
        f"{_fmt(med_kept or 0.0)} without{f'; --steps {lead}: excludes them' if lead else ''}); capture with {SCHEDULE}"
    )
    return _row(
        "warm-up",
        "limited",
        short,
        what,
        eff,
        thr,
        median_step_us=med_all,
        median_step_without_us=med_kept,
        warm_up_steps=len(found),
        named=names,
    )


def _too_few_steps(trace: Trace) -> QualityCheck:
    n = len(trace.steps)
    thr = "2 steps: the least that gives a step-to-step spread"
    eff = "diff and what-if predictions say their error cannot be measured"
    if n >= 2:
        return _row("too-few-steps", "ok", "", f"{n} steps give a step-to-step noise band", eff, thr, steps=n)
    src = trace.step_source
    how = "no ProfilerStep span: the whole trace is one step" if src == "whole trace" else "one step captured"
    return _row(
        "too-few-steps",
        "limited",
        f"one step: no noise band, so diff and predictions cannot give their error; capture with {SCHEDULE}",
        f"{how}: no step-to-step spread, so diff and what-if predictions cannot measure their error",
        eff,
        thr,
        steps=n,
    )


def _clock_order(trace: Trace, q: Quality) -> QualityCheck:
    k = step_kernels(trace)
    n = len(k)
    early = (
        int((k["ts_us"].to_numpy() < k["launch_ts_us"].to_numpy() - ORDER_TOL_US).sum()) if n else 0
    )  # NaN launch (unlaunched) compares False
    neg = 0
    if n:
        ks = k.sort_values(["stream", "ts_us"], kind="stable")
        same = ks["stream"].to_numpy()[1:] == ks["stream"].to_numpy()[:-1]
        neg = int((same & (ks["ts_us"].to_numpy()[1:] < ks["end_us"].to_numpy()[:-1] - ORDER_TOL_US)).sum())
    st = trace.steps
    overlap_steps = int((st["start_us"].to_numpy()[1:] < st["end_us"].to_numpy()[:-1] - ORDER_TOL_US).sum())
    allk = primary_kernels(trace)  # the timeline's device (trace.device_id), every step or not
    tot = float(allk["dur_us"].sum()) if len(allk) else 0.0
    u = iv.union(allk["ts_us"], allk["end_us"]) if len(allk) else iv.EMPTY
    steps = step_set(trace)
    busy = iv.total(u)
    inside = float(iv.per_window(u, steps[0], steps[1]).sum())  # the steps are disjoint: no piece counted twice
    outside = (busy - inside) / busy if busy else 0.0
    bad = early / n if n else 0.0
    status = "ok"
    notes = []
    if bad > CLOCK_LIMITED_FRAC:
        status = "poor" if bad > CLOCK_POOR_FRAC else "limited"
        notes.append(
            f"{early} of {n} kernels ({100 * bad:.1f}%) start before their launch call: GPU and host clocks disagree"
        )
        q.lower_confidence = notes[-1]
    if overlap_steps:
        status = max(status, "limited", key=STATUS_ORDER.get)
        notes.append(f"{overlap_steps} ProfilerStep span(s) overlap the next: per-step figures count that time twice")
    if outside > OUTSIDE_MAX_FRAC:
        status = max(status, "limited", key=STATUS_ORDER.get)
        notes.append(f"{100 * outside:.0f}% of GPU busy time lies outside every step and is not analysed")
    return _row(
        "clock-order",
        status,
        "; ".join(notes),
        "; ".join(notes)
        or (
            f"{early} kernels before their launch among {n}; steps do not overlap; "
            f"{100 * outside:.1f}% of GPU busy time outside the steps"
        )
        + (
            f" ({neg} kernels overlap the previous one on their stream: counted, not judged, since programmatic "
            "dependent launch lets a kernel start before its predecessor ends on Hopper and later)"
            if neg
            else ""
        ),
        effect="past the threshold every finding that claims idle time has its confidence lowered one level",
        threshold=(
            f"{100 * CLOCK_LIMITED_FRAC:g}% of kernels out of order: limited, {100 * CLOCK_POOR_FRAC:g}%: poor; "
            f"any overlapping steps; {100 * OUTSIDE_MAX_FRAC:g}% of GPU busy time outside the steps"
        ),
        kernels=n,
        before_launch=early,
        negative_gaps=neg,
        overlapping_steps=overlap_steps,
        outside_steps_frac=outside,
        kernel_us=tot,
    )


def _profiler_overhead(trace: Trace, win: float) -> QualityCheck:
    ov = profiler_overhead(trace)
    frac = ov.window_us / win if win > 0 else 0.0
    thr = (
        f"{100 * OVERHEAD_LIMITED_FRAC:g}% of the analysed steps: the estimate alone reaches host-bound's default "
        "claim (min_frac)"
    )
    eff = (
        "host-bound and launch-bound drop to low confidence and ask for a re-capture where the estimate alone "
        "lifts their claim over their threshold"
    )
    names = ", ".join(s.setting for s in ov.settings)
    if not ov.settings:
        summary = "no costly profiler setting on (with_stack, record_shapes, with_flops, profile_memory)"
    else:
        summary = (
            f"{names} on: about {_fmt(ov.us_per_step)} of host time per step ({100 * frac:.1f}% of the analysed "
            f"steps), from the per-unit costs measured with {ov.measured_with}"
        )
    status = "limited" if frac >= OVERHEAD_LIMITED_FRAC else "ok"
    short = (
        f"the profiler's own settings ({names}) add about {_fmt(ov.us_per_step)}/step of host time "
        f"({100 * frac:.0f}%): host-side figures include it; capture without "
        f"{ov.settings[0].setting} to check"
        if status != "ok"
        else ""
    )
    return _row(
        "profiler-overhead",
        status,
        short,
        summary,
        eff,
        thr,
        host_us_per_step=ov.us_per_step,
        share_of_steps=frac,
    )
