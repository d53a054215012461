"""Analyse one Trace into its Report: run the causes (causes.py), then build the sections: the trace and
its steps, the breakdown, the explained-time account (account.py), the verdict and its fix path
(verdict.py), the top kernels, efficiency and memory.

The multi-rank path (one report for a folder of rank files) is multirank.py. Renders nothing.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .facts import trace_quality
from .detectors.base import Context, Detector, in_steps, window_label
from .facts.efficiency import section as efficiency_section
from .facts.memory_fit import memory_section
from .findings import Finding
from .sections import py
from .report import Efficiency, Gpu, Memory, Peaks, Part, Report, StepRow, Steps, TopKernel, TraceInfo, TraceQuality
from .timeline_sample import representative_step
from .account import build_account
from .causes import MIN_WINDOW_US, run_detectors, with_replay
from .verdict import build_verdict
from .whatif import batch as whatif_batch
from .trace.model import Trace
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


def _memory(trace: Trace, findings: list[Finding]) -> Memory:
    """The memory section, with the batch growth the launch-bound fix recommends (one sizing, one number)."""
    if any(f.name == "launch-bound" for f in findings):
        plan = whatif_batch.batch_plan(trace)
        if plan.fit is not None:
            return memory_section(trace, plan.fit, "launch-bound (replay of the larger-batch fix)")
    return memory_section(trace)


def analyze(
    trace: Trace, *, strict: bool = False, detectors: Sequence[type[Detector]] | None = None, config=None
) -> Report:
    judged = (trace.has_gpu or trace.has_cpu) and len(trace.steps) and trace.window_us >= MIN_WINDOW_US
    quality = trace_quality.quality(trace) if judged else None  # before the detectors: they read its blind time
    findings, skipped, failures = (
        run_detectors(trace, detectors, strict=strict, config=config)
        if trace.has_gpu or trace.has_cpu
        else ([], [], [])
    )
    if judged and trace.has_gpu:
        findings = with_replay(trace, findings)
    warnings = list(trace.warnings)  # the Trace is not changed: analyze() twice gives one report
    if trace.window_us < MIN_WINDOW_US and (trace.has_gpu or trace.has_cpu):
        warnings.append(
            f"the analysed window is only {trace.window_us:.1f} us (under 1 ms): no cause was judged; "
            "capture a few whole training steps"
        )
    breakdown = _breakdown(trace)
    account = build_account(trace, findings, skipped, breakdown)
    if account and account.overlap_us > 1.0:
        warnings.append(
            f"findings claim {account.overlap_us / 1e3:.1f} ms of GPU idle time twice "
            "(overlapping claims): the explained-time account counts it once"
        )
    return Report(
        trace=_trace_section(trace),
        steps=_steps_section(trace),
        breakdown=breakdown,
        findings=findings,
        skipped=skipped,
        failures=failures,
        warnings=warnings,
        verdict=build_verdict(trace, findings, account, skipped),
        account=account,
        top_kernels=_top_kernels(trace),
        timeline_sample=representative_step(trace),
        efficiency=efficiency_section(trace) if trace.has_gpu and trace.window_us >= MIN_WINDOW_US else Efficiency(),
        memory=_memory(trace, findings),
        settings=config.non_default() if config is not None else {},
        trace_quality=TraceQuality(status=quality.status, line=quality.line, checks=list(quality.checks))
        if quality
        else TraceQuality(),
    )


def _trace_section(trace: Trace) -> TraceInfo:
    m = trace.meta
    dev = trace.device
    gpu = None
    if dev is not None:
        p = dev.peaks
        gpu = Gpu(
            id=py(dev.id),
            name=dev.name,
            arch=dev.arch,
            compute_capability=None if dev.compute_major is None else f"{dev.compute_major}.{dev.compute_minor or 0}",
            num_sms=py(dev.num_sms),
            memory_bytes=py(dev.total_mem_bytes),
            rocm=bool(dev.is_rocm),
            peaks=None
            if p is None
            else Peaks(
                name=p.name,
                fp32_tflops=py(p.fp32_tflops),
                tf32_tflops=py(p.tf32_tflops),
                half_tflops=py(p.half_tflops),
                approximate=bool(p.approximate),
            ),
        )
    rc = m.run_config or {}
    return TraceInfo(
        file=os.path.basename(m.path),
        file_bytes=py(m.file_bytes),
        json_bytes=py(m.json_bytes),
        events=py(m.n_events),
        lost_bytes=py(m.lost_bytes),
        dropped_events=py(m.dropped_events),
        truncated=m.truncated,
        steps_dropped=list(m.steps_dropped),
        rank=py(m.rank),
        rank_source=m.rank_source,
        world_size=py(m.world_size),
        gpu=gpu,
        gpu_count_in_trace=len({int(d) for d in trace.kernels["device"].unique()}) if len(trace.kernels) else 0,
        window=window_label(trace) if len(trace.steps) else "",
        profiler=m.profiler,
        profiler_source=m.profiler_source,
        versions=m.versions,
        framework=Context.of(trace).framework,
        run_config=rc.get("config") if isinstance(rc.get("config"), dict) else None,
        run_framework=rc.get("framework") if isinstance(rc.get("framework"), dict) else None,
        origin_us=py(m.origin_us),
        base_time_ns=py(m.base_time_ns),
        has_gpu=bool(trace.has_gpu),
        has_cpu=bool(trace.has_cpu),
    )


def _steps_section(trace: Trace) -> Steps:
    st = trace.steps
    d = st["dur_us"].to_numpy()
    rows = []
    per = trace.timeline.per_step if trace.has_gpu else None
    for i, r in enumerate(st.itertuples(index=False)):
        rows.append(
            StepRow(
                step=int(r.step),
                start_us=round(float(r.start_us), 3),
                dur_us=round(float(r.dur_us), 3),
                **(
                    {"breakdown_us": {p: round(float(per[f"{p}_us"].iloc[i]), 3) for p in PARTS}}
                    if per is not None
                    else {}
                ),
            )
        )
    return Steps(
        count=int(len(st)),
        source=str(trace.step_source),
        mean_us=float(d.mean()) if d.size else 0.0,
        median_us=float(np.median(d)) if d.size else 0.0,
        min_us=float(d.min()) if d.size else 0.0,
        max_us=float(d.max()) if d.size else 0.0,
        std_us=float(d.std(ddof=1)) if d.size > 1 else 0.0,
        window_us=float(d.sum()),
        per_step=rows,
    )


def _breakdown(trace: Trace) -> dict[str, Part]:
    if not trace.has_gpu:
        return {}
    per = trace.timeline.per_step
    win = float(per["dur_us"].sum())
    n = len(per)

    def part(label: str, us: float) -> Part:
        return Part(label=label, us=us, frac=us / win if win else 0.0, per_step_us=us / n if n else 0.0)

    out = {p: part(PART_LABELS[p], float(per[f"{p}_us"].sum())) for p in PARTS}
    out["gpu_busy"] = part("GPU busy (any kernel or copy)", sum(out[p].us for p in ("compute", "comm", "memcpy")))
    return out


def _top_kernels(trace: Trace, n: int = 10) -> list[TopKernel]:
    k = trace.kernels
    if not len(k):
        return []

    k = in_steps(k, trace)
    if not len(k):
        return []
    g = k.groupby("name", observed=True)["dur_us"].agg(["count", "sum", "median"]).sort_values("sum", ascending=False)
    tot = float(k["dur_us"].sum())
    return [
        TopKernel(
            name=str(name),
            count=int(r["count"]),
            total_us=float(r["sum"]),
            median_us=float(r["median"]),
            frac_of_kernel_time=float(r["sum"]) / tot if tot else 0.0,
        )
        for name, r in g.head(n).iterrows()
    ]
