"""Run every detector over a Trace (a failing one becomes a Failure), rank, and build the Report.

Also the multi-rank path: each rank is a pure function file -> report dict, run in a process pool,
then reduced into one report that calls out the slowest rank. Renders nothing.
"""
from __future__ import annotations

import os
import traceback
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from . import detectors as registry
from .detectors.base import Context, Detector, window_label
from .detectors.memory_fit import memory_section
from .errors import DetectorFailed, TraceError, UsageError
from .findings import Failure, Finding, Skipped
from .report import Report
from .timeline_sample import representative_step
from .trace.model import Trace, load_trace
from .trace.timeline import PARTS

PART_LABELS = {
    "compute": "GPU compute",
    "comm": "communication (not overlapped)",
    "memcpy": "memcpy/memset (no kernel running)",
    "idle_dataloader": "idle: waiting for the DataLoader",
    "idle_sync": "idle: host synchronisation",
    "idle_launch": "idle: kernel launch overhead",
    "idle_cpu": "idle: other CPU work",
    "idle_unknown": "idle: unattributed",
}


MIN_WINDOW_US = 1000.0  # a training step is milliseconds at least; shorter windows are test artifacts


def run_detectors(trace: Trace, detectors: Sequence[type[Detector]] | None = None, *, strict: bool = False):
    ctx = Context.of(trace)
    detectors = registry.ALL if detectors is None else detectors
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    failures: list[Failure] = []
    if ctx.window_us < MIN_WINDOW_US:
        reason = f"the analysed window is only {ctx.window_us:.1f} us, too short to judge a training step"
        return [], [Skipped(code=d.code, name=d.name, reason=reason) for d in detectors], []
    for cls in detectors:
        det = cls()
        try:
            for item in det.detect(trace, ctx):
                (findings if isinstance(item, Finding) else skipped).append(item)
        except Exception as e:  # a broken detector must not hide the others
            if strict:
                raise DetectorFailed(f"detector {cls.name} failed: {type(e).__name__}: {e}") from e
            tb = traceback.extract_tb(e.__traceback__)[-1]
            failures.append(Failure(code=cls.code, name=cls.name,
                                    error=f"{type(e).__name__}: {e} (at {os.path.basename(tb.filename)}:{tb.lineno})"))
    findings.sort(key=lambda f: (-f.time_lost_us, f.code))
    return findings, skipped, failures


def analyze(trace: Trace, *, strict: bool = False, detectors: Sequence[type[Detector]] | None = None) -> Report:
    findings, skipped, failures = run_detectors(trace, detectors, strict=strict) if trace.has_gpu or trace.has_cpu else ([], [], [])
    if trace.window_us < MIN_WINDOW_US and (trace.has_gpu or trace.has_cpu):
        trace.warnings.append(f"the analysed window is only {trace.window_us:.1f} us (under 1 ms): no cause was judged; "
                              "capture a few whole training steps")
    return Report(trace=_trace_section(trace), steps=_steps_section(trace),
                  breakdown=_breakdown(trace), findings=findings, skipped=skipped, failures=failures,
                  warnings=list(trace.warnings), verdict=_verdict(trace, findings),
                  top_kernels=_top_kernels(trace),
                  timeline_sample=representative_step(trace) if trace.has_gpu else {},
                  memory=memory_section(trace))


def _trace_section(trace: Trace) -> dict:
    m = trace.meta
    dev = trace.device
    gpu = None
    if dev is not None:
        gpu = {"id": dev.id, "name": dev.name, "arch": dev.arch,
               "compute_capability": None if dev.compute_major is None else f"{dev.compute_major}.{dev.compute_minor or 0}",
               "num_sms": dev.num_sms, "memory_bytes": dev.total_mem_bytes, "rocm": dev.is_rocm,
               "peaks": None if dev.peaks is None else {
                   "name": dev.peaks.name, "fp32_tflops": dev.peaks.fp32_tflops, "tf32_tflops": dev.peaks.tf32_tflops,
                   "half_tflops": dev.peaks.half_tflops, "approximate": dev.peaks.approximate}}
    rc = m.run_config or {}
    return {
        "file": os.path.basename(m.path),
        "file_bytes": m.file_bytes, "json_bytes": m.json_bytes, "events": m.n_events,
        "lost_bytes": m.lost_bytes, "dropped_events": m.dropped_events,
        "rank": m.rank, "rank_source": m.rank_source, "world_size": m.world_size,
        "gpu": gpu, "gpu_count_in_trace": len({int(d) for d in trace.kernels["device"].unique()}) if len(trace.kernels) else 0,
        "window": window_label(trace) if len(trace.steps) else "",
        "profiler": m.profiler, "versions": m.versions,
        "framework": Context.of(trace).framework,
        "run_config": rc.get("config") if isinstance(rc.get("config"), dict) else None,
        "run_framework": rc.get("framework") if isinstance(rc.get("framework"), dict) else None,
        "origin_us": m.origin_us, "base_time_ns": m.base_time_ns,
        "has_gpu": trace.has_gpu, "has_cpu": trace.has_cpu,
    }


def _steps_section(trace: Trace) -> dict:
    st = trace.steps
    d = st["dur_us"].to_numpy()
    rows = []
    per = trace.timeline.per_step if trace.has_gpu else None
    for i, r in enumerate(st.itertuples(index=False)):
        row = {"step": int(r.step), "start_us": round(float(r.start_us), 3), "dur_us": round(float(r.dur_us), 3)}
        if per is not None:
            row["breakdown_us"] = {p: round(float(per[f"{p}_us"].iloc[i]), 3) for p in PARTS}
        rows.append(row)
    return {
        "count": int(len(st)), "source": trace.step_source,
        "mean_us": float(d.mean()) if d.size else 0.0, "median_us": float(np.median(d)) if d.size else 0.0,
        "min_us": float(d.min()) if d.size else 0.0, "max_us": float(d.max()) if d.size else 0.0,
        "std_us": float(d.std(ddof=1)) if d.size > 1 else 0.0,
        "window_us": float(d.sum()),
        "per_step": rows,
    }


def _breakdown(trace: Trace) -> dict:
    if not trace.has_gpu:
        return {}
    per = trace.timeline.per_step
    win = float(per["dur_us"].sum())
    n = len(per)
    out = {}
    for p in PARTS:
        us = float(per[f"{p}_us"].sum())
        out[p] = {"label": PART_LABELS[p], "us": us, "frac": us / win if win else 0.0,
                  "per_step_us": us / n if n else 0.0}
    busy = sum(out[p]["us"] for p in ("compute", "comm", "memcpy"))
    out["gpu_busy"] = {"label": "GPU busy (any kernel or copy)", "us": busy, "frac": busy / win if win else 0.0,
                       "per_step_us": busy / n if n else 0.0}
    return out


def _verdict(trace: Trace, findings: list[Finding]) -> dict:
    st = trace.steps
    if not len(st):
        return {}
    median = float(st["dur_us"].median())
    if not findings:
        headline = ("No significant slowdown found in the analysed steps." if trace.has_gpu else
                    "No GPU activity in this trace, so the GPU analyses could not run: capture with "
                    "ProfilerActivity.CUDA on a GPU machine.")
        return {"top": None, "headline": headline, "median_step_us": median}
    top = findings[0]
    fixable = [f for f in findings if f.confidence != "low"][:3]
    saved = sum(f.time_lost_per_step_us for f in fixable)
    # causes are assumed independent; never promise more than 90% of the step back
    saved = min(saved, 0.9 * median)
    return {
        "top": top.name, "top_title": top.title,
        "top_per_step_us": top.time_lost_per_step_us, "top_frac": top.time_lost_frac,
        "median_step_us": median,
        "expected_step_us": median - saved,
        "expected_from": [f.name for f in fixable],
        "assumption": ("estimate: median step time minus the per-step time lost of the top "
                       f"{len(fixable)} medium/high-confidence causes, assuming they are independent "
                       "and each fix recovers its estimate (capped at 90% of the step)"),
    }


def _top_kernels(trace: Trace, n: int = 10) -> list[dict]:
    k = trace.kernels
    if not len(k):
        return []
    from .detectors.base import in_steps
    k = in_steps(k, trace)
    if not len(k):
        return []
    g = k.groupby("name", observed=True)["dur_us"].agg(["count", "sum", "median"]).sort_values("sum", ascending=False)
    tot = float(k["dur_us"].sum())
    return [{"name": str(name), "count": int(r["count"]), "total_us": float(r["sum"]),
             "median_us": float(r["median"]), "frac_of_kernel_time": float(r["sum"]) / tot if tot else 0.0}
            for name, r in g.head(n).iterrows()]


# --- one path, several ranks ------------------------------------------------------------------------

def analyze_file(path: str, steps: str | None = None, strict: bool = False,
                 warn_default_rank: bool = False) -> dict:
    """Pure function: one trace file -> report dict (what a process pool or Dask maps)."""
    trace = load_trace(path, warn_default_rank=warn_default_rank, jobs=1)  # ranks are the parallel unit
    trace.select_steps(steps)
    return analyze(trace, strict=strict).to_dict()


def _safe_analyze_file(args) -> dict:
    path, steps, strict = args
    try:
        return analyze_file(path, steps, strict, warn_default_rank=True)
    except TraceError as e:
        return {"error": str(e), "hint": e.hint, "path": path}


def analyze_many(paths: Sequence[str], *, steps: str | None = None, strict: bool = False,
                 jobs: int | None = None, mapper: Callable | None = None,
                 keep_rank: int | None = None) -> Report:
    """Analyse rank files in parallel and reduce them into one report led by the slowest rank."""
    work = [(str(p), steps, strict) for p in paths]
    if mapper is not None:
        results = list(mapper(_safe_analyze_file, work))
    else:
        jobs = jobs or min(len(work), os.cpu_count() or 1)
        if jobs <= 1 or len(work) == 1:
            results = [_safe_analyze_file(w) for w in work]
        else:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                results = list(ex.map(_safe_analyze_file, work))
    if keep_rank is not None:
        for r in results:
            if "error" not in r and r["trace"]["rank"] == keep_rank:
                return Report.from_dict(r)
        found = sorted(r["trace"]["rank"] for r in results if "error" not in r)
        raise UsageError(f"--rank {keep_rank}: no such rank among the files (ranks found: {found})")
    return reduce_ranks(results)


def reduce_ranks(results: list[dict]) -> Report:
    ok = [r for r in results if "error" not in r]
    bad = [r for r in results if "error" in r]
    if not ok:
        first = bad[0]
        raise TraceError(first["path"], first["error"].split(": ", 1)[-1], hint=first.get("hint", ""))
    ok.sort(key=lambda r: r["trace"]["rank"])
    med = [r["steps"]["median_us"] for r in ok]
    slow = int(np.argmax(med))
    fastest = float(np.min(med))
    lead = Report.from_dict(ok[slow])
    lead.ranks = [{
        "rank": r["trace"]["rank"], "file": r["trace"]["file"], "median_step_us": r["steps"]["median_us"],
        "mean_step_us": r["steps"]["mean_us"], "steps": r["steps"]["count"],
        "gpu_busy_frac": r["breakdown"].get("gpu_busy", {}).get("frac"),
        "top_finding": r["findings"][0]["name"] if r["findings"] else None,
        "slowest": i == slow,
    } for i, r in enumerate(ok)]
    if len(ok) > 1:
        lead.warnings.insert(0, (
            f"{len(ok)} ranks analysed; the findings below are rank {ok[slow]['trace']['rank']}'s, the slowest "
            f"(median step {med[slow] / 1e3:.1f} ms vs fastest {fastest / 1e3:.1f} ms, "
            f"{(med[slow] / fastest - 1) * 100 if fastest else 0:.0f}% slower)"))
    for b in bad:
        lead.warnings.append(f"{b['error']} (this file was skipped)")
    for r in ok:
        if r is ok[slow]:
            continue
        for w in r["warnings"]:
            if "no rank in distributedInfo" in w:
                lead.warnings.append(w)
    return lead
