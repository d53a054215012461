"""Run every detector over a Trace (a failing one becomes a Failure), rank, and build the Report.

Also the multi-rank path: each rank is a pure function file -> report dict, run in a process pool,
then reduced into one report that calls out the slowest rank. Renders nothing.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

import msgspec
import numpy as np
import pandas as pd

from . import detectors as registry
from .facts import claims
from .facts import trace_quality
from .detectors.base import Context, Detector, fmt_us, in_steps, projected_step, window_label
from .facts.efficiency import section as efficiency_section
from .facts.steps import idle_in_steps
from .facts.memory_fit import memory_section
from .errors import DetectorFailed, TraceError, UsageError
from .findings import Evidence, Failure, Finding, Skipped
from .sections import (
    UNSET,
    AccountArtifact,
    AccountPart,
    AccountStep,
    BusyCause,
    FixStep,
    Rediagnosed,
    UnexplainedReason,
    WhatIf,
    py,
)
from .report import (
    Account,
    CrossRank,
    Efficiency,
    Gpu,
    Memory,
    Peaks,
    Part,
    RankSummary,
    Report,
    StepRow,
    Steps,
    TopKernel,
    TraceInfo,
    TraceQuality,
    Verdict,
    known,
)
from .timeline_sample import representative_step
from .whatif import batch as whatif_batch
from .whatif import engine as whatif
from .trace.model import Trace, default_rank_warning, load_trace
from .trace import intervals as iv
from .trace.rundir import RankFile, check_one_run
from .trace.ranks import align, rank_collectives
from .whatif import job
from .trace.timeline import IDLE_PARTS, PARTS

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

# Ranking: time lost weighted by how sure the estimate is, so a low-confidence guess or an upper bound
# does not head the report over a high-confidence cause of similar size.
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.7, "low": 0.35}
UPPER_BOUND_WEIGHT = 0.8
VERDICT_MIN_FRAC = 0.01  # a cause must cost at least 1% of the window to become the verdict
UNEXPLAINED_MAX_FRAC = 0.10  # more unexplained GPU idle than this (of the step) is never "no slowdown"
# The verdict's per-step figures are means over the window (time lost / steps) and its step times are
# medians: where the mean step is this much above the median, slow steps hold the difference, and the
# verdict says which, so a per-step loss is never read against a typical step it does not describe.
SKEWED_MEAN_RATIO = 1.10
SLOW_STEP_RATIO = 1.5  # a step this much above the median step is a slow step
UNEXPLAINED = "unexplained"  # masked_by entry when no finding explains the GPU idle that hides a cause

# the detector that claims each idle part (the account says why a part stayed unexplained)
PART_OWNER = claims.PART_OWNER  # facts/claims.py resolves who claims what


def rank_score(f: Finding) -> float:
    return f.time_lost_us * CONFIDENCE_WEIGHT.get(f.confidence, 0.5) * (UPPER_BOUND_WEIGHT if f.upper_bound else 1.0)


def rank(findings: list[Finding]) -> list[Finding]:
    """Mark latent causes masked by the active ones that keep the GPU waiting, then order: active causes
    by confidence-weighted time lost, then the masked ones (next bottlenecks) by their projected cost."""

    def is_latent(f: Finding) -> bool:
        return f.projected_lost_us is not None  # detectors set it only for a cause off the critical path

    active = sorted((f for f in findings if not is_latent(f)), key=lambda f: (-rank_score(f), f.code))
    maskers = tuple(f.name for f in active if f.idle_claims_us and f.time_lost_us > 0)
    latent = [dataclasses.replace(f, masked_by=maskers or (UNEXPLAINED,)) for f in findings if is_latent(f)]
    latent.sort(key=lambda f: (-(f.projected_lost_us or 0.0) * CONFIDENCE_WEIGHT.get(f.confidence, 0.5), f.code))
    return active + latent


def _memory(trace: Trace, findings: list[Finding]) -> Memory:
    """The memory section, with the batch growth the launch-bound fix recommends (one sizing, one number)."""
    if any(f.name == "launch-bound" for f in findings):
        plan = whatif_batch.batch_plan(trace)
        if plan.fit is not None:
            return memory_section(trace, plan.fit, "launch-bound (replay of the larger-batch fix)")
    return memory_section(trace)


def detector_context(trace: Trace) -> Context:
    """The facts detectors share, with the run's batch plan (sized by the replay, whatif/batch.py)."""
    return Context.of(trace, batch_plan=lambda: whatif_batch.batch_plan(trace))


def run_detectors(
    trace: Trace, detectors: Sequence[type[Detector]] | None = None, *, strict: bool = False, config=None
):
    """`config` (traceinspect.config.Config): which detectors run, and their thresholds."""
    ctx = detector_context(trace)
    if detectors is None:
        detectors = config.detectors() if config is not None else registry.ALL
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    failures: list[Failure] = []
    if ctx.window_us < MIN_WINDOW_US:
        reason = f"the analysed window is only {ctx.window_us:.1f} us, too short to judge a training step"
        return [], [Skipped(code=d.code, name=d.name, reason=reason) for d in detectors], []
    # the claims every detector reads (who reserved which idle time first) follow this run's thresholds
    claims.configure(trace, config.make if config is not None else None)
    for cls in detectors:
        det = config.make(cls) if config is not None else cls()
        try:
            for item in det.detect(trace, ctx):
                (findings if isinstance(item, Finding) else skipped).append(item)
        except Exception as e:  # a broken detector must not hide the others
            if strict:
                raise DetectorFailed(f"detector {cls.name} failed: {type(e).__name__}: {e}") from e
            tb = traceback.extract_tb(e.__traceback__)[-1]
            failures.append(
                Failure(
                    code=cls.code,
                    name=cls.name,
                    error=f"{type(e).__name__}: {e} (at {os.path.basename(tb.filename)}:{tb.lineno})",
                )
            )
    return rank(_trusted(trace, findings)), skipped, failures


LOWER = {"high": "medium", "medium": "low", "low": "low"}
ALONE_LABEL = "predicted median step with this fix alone (replay, docs/whatif.md)"


def _with_replay(trace: Trace, findings: list[Finding]) -> list[Finding]:
    """Each finding whose fix has a replay transformation states what the replay predicts for that fix
    alone: one number, read by the evidence and by the verdict's saved-alone costs (whatif.alone)."""
    known = whatif.transforms()
    if not any(f.name in known for f in findings):
        return findings
    w = window_label(trace)
    return [
        dataclasses.replace(
            f,
            evidence=f.evidence
            + (
                Evidence(
                    label=ALONE_LABEL,
                    value=round(whatif.alone(trace, findings, f.name).median_us / 1e3, 3),
                    unit="ms",
                    window=w,
                ),
            ),
        )
        if f.name in known
        else f
        for f in findings
    ]


def _trusted(trace: Trace, findings: list[Finding]) -> list[Finding]:
    """Findings whose time rests on the trace's clocks carry the trace-quality warning: a finding that
    claims idle time has its confidence lowered one level, with the reason in its evidence."""
    why = trace_quality.quality(trace).lower_confidence
    if not why:
        return findings
    return [
        dataclasses.replace(
            f,
            confidence=LOWER.get(f.confidence, "low"),
            evidence=f.evidence + (Evidence(label="confidence lowered (trace quality, clock-order)", value=why),),
        )
        if f.idle_claims_us
        else f
        for f in findings
    ]


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
        findings = _with_replay(trace, findings)
    warnings = list(trace.warnings)  # the Trace is not changed: analyze() twice gives one report
    if trace.window_us < MIN_WINDOW_US and (trace.has_gpu or trace.has_cpu):
        warnings.append(
            f"the analysed window is only {trace.window_us:.1f} us (under 1 ms): no cause was judged; "
            "capture a few whole training steps"
        )
    breakdown = _breakdown(trace)
    account = _account(trace, findings, skipped, breakdown)
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
        verdict=_verdict(trace, findings, account, skipped),
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


def _account(trace: Trace, findings: list[Finding], skipped: list[Skipped], breakdown: dict[str, Part]) -> Account:
    """The GPU idle time of the analysed steps split into what each active finding claims plus an
    explicit "unexplained" part, per idle part of the timeline. The parts add up to the idle time."""
    if not breakdown:
        return Account()
    win = float(trace.steps["dur_us"].sum())
    n = max(len(trace.steps), 1)
    idle_by = {p: float(breakdown[p].us) for p in IDLE_PARTS}
    idle = sum(idle_by.values())
    left = dict(idle_by)
    parts = []
    for f in findings:
        if f.masked_by or not f.idle_claims_us:
            continue
        us = sum(f.idle_claims_us.values())
        for p, v in f.idle_claims_us.items():
            left[p] = left.get(p, 0.0) - v
        parts.append(
            AccountPart(
                name=f.name,
                code=f.code,
                us=us,
                per_step_us=us / n,
                frac_of_idle=us / idle if idle else 0.0,
                frac_of_step=us / win if win else 0.0,
                by_part_us=dict(f.idle_claims_us),
            )
        )
    overlap = sum(-v for v in left.values() if v < 0)
    artifacts, artifact_steps = _artifacts(trace, left, win, n)
    unexpl_by = {p: max(v, 0.0) for p, v in left.items()}
    unexplained = sum(unexpl_by.values())
    explained = idle - unexplained
    skip_reason = {s.name: s for s in skipped}
    reasons = []
    for p in IDLE_PARTS:
        us = unexpl_by[p]
        if win and us / win >= 0.005:
            reasons.append(
                UnexplainedReason(
                    part=p,
                    us=us,
                    per_step_us=us / n,
                    frac_of_step=us / win,
                    why=_unexplained_why(trace, p, skip_reason),
                )
            )
    reasons.sort(key=lambda r: -r.us)
    per_step = _account_per_step(trace, [f for f in findings if not f.masked_by and f.idle_claims_us], artifact_steps)
    busy_causes = [
        BusyCause(
            name=f.name,
            code=f.code,
            us=f.time_lost_us - sum(f.idle_claims_us.values()),
            per_step_us=(f.time_lost_us - sum(f.idle_claims_us.values())) / n,
        )
        for f in findings
        if not f.masked_by and f.time_lost_us - sum(f.idle_claims_us.values()) > 1e-6
    ]
    return Account(
        idle_us=idle,
        idle_per_step_us=idle / n,
        idle_frac_of_step=idle / win if win else 0.0,
        parts=parts,
        explained_us=explained,
        explained_frac_of_idle=explained / idle if idle else 1.0,
        unexplained_us=unexplained,
        unexplained_per_step_us=unexplained / n,
        unexplained_frac_of_step=unexplained / win if win else 0.0,
        unexplained_by_part_us=unexpl_by,
        unexplained_reasons=reasons,
        busy_causes=busy_causes,
        overlap_us=overlap,
        per_step=per_step,
        artifacts=artifacts or UNSET,
    )


def _artifacts(trace: Trace, left: dict, win: float, n: int) -> tuple[list[AccountArtifact], np.ndarray]:
    """The idle time trace quality names (inside graph replays, queue waits for work not in the trace),
    taken from what no finding claimed (`left`, per idle part, reduced in place), and its per-step share."""
    q = trace_quality.quality(trace) if trace.window_us >= MIN_WINDOW_US else None
    per = trace.timeline.per_step
    s0, s1 = per["start_us"].to_numpy(), per["end_us"].to_numpy()
    by_step = np.zeros(len(per))
    out = []
    for label, blind in q.blind.items() if q else ():
        by_part = {}
        for p in IDLE_PARTS:
            inside = iv.intersect(idle_in_steps(trace, p), blind)
            tot = iv.total(inside)
            take = min(tot, max(left.get(p, 0.0), 0.0))
            if take <= 0.0:
                continue
            left[p] -= take
            by_part[p] = take
            by_step += (take / tot) * iv.per_window(inside, s0, s1)
        us = sum(by_part.values())
        if us > 0.0:
            out.append(
                AccountArtifact(
                    check=trace_quality.LABEL_CHECK[label],
                    label=label,
                    us=us,
                    per_step_us=us / n,
                    frac_of_step=us / win if win else 0.0,
                    by_part_us=by_part,
                )
            )
    return out, by_step


def _account_per_step(trace: Trace, claimers: list[Finding], artifacts: np.ndarray) -> list[AccountStep]:
    """Each step's GPU idle time, what each finding claims of it, and the unexplained rest (less the
    idle time trace quality names, `artifacts` per step)."""
    per = trace.timeline.per_step
    s0, s1 = per["start_us"].to_numpy(), per["end_us"].to_numpy()
    idle = sum(per[f"{p}_us"].to_numpy() for p in IDLE_PARTS)
    claims = {}
    for f in claimers:
        c = np.zeros(len(per))
        for p, us in f.idle_claims_us.items():
            if p in f.claim_sets:
                st, en, factor = f.claim_sets[p]
                c += factor * iv.per_window((st, en), s0, s1)
            else:  # a claim without its intervals (not from a detector): spread like the part's idle
                part = per[f"{p}_us"].to_numpy()
                c += us * part / part.sum() if part.sum() else 0.0
        claims[f.name] = c
    out = []
    for i in range(len(per)):
        cl = {name: float(c[i]) for name, c in claims.items()}
        out.append(
            AccountStep(
                step=int(per["step"].iloc[i]),
                idle_us=float(idle[i]),
                claims_us=cl,
                unexplained_us=max(float(idle[i]) - sum(cl.values()) - float(artifacts[i]), 0.0),
                artifacts_us=float(artifacts[i]) if artifacts.any() else UNSET,
            )
        )
    return out


def _unexplained_why(trace: Trace, part: str, skip_reason: dict[str, Skipped]) -> str:
    if part == "idle_unknown":
        if not len(trace.runtime):
            return (
                "the trace has no host (CUDA/HIP runtime) events, so GPU idle time cannot be tied to host work: "
                "capture with ProfilerActivity.CPU as well"
            )
        return (
            "the GPU had its next op queued and still waited: kernel-to-kernel latency, or a dependency on "
            "another stream, event, rank or process that this trace does not show (or GPU timestamps offset from "
            "the CPU clock)" + _longest_wait(trace)
        )
    owner = PART_OWNER[part]
    if owner in skip_reason:
        s = skip_reason[owner]
        return (
            f"{owner} looked at it and did not report: {s.reason}"
            if s.checked
            else f"{owner} could not judge it: {s.reason}"
        )
    if part == "idle_sync":
        return (
            "the host was blocked in a synchronising call while the GPU already had its next op queued: the "
            "GPU waited on a dependency (another stream, event or process), not on the host"
        )
    if part == "idle_cpu":
        return "host work between launches that no detector claimed"
    if part == "idle_launch":
        return "short launch gaps that no detector claimed"
    return "not claimed by any finding"


def _longest_wait(trace: Trace) -> str:
    """'; longest: 58.9 ms before <op> on stream 84, issued 2.7 ms before the GPU went idle' (or '')."""
    tl = trace.timeline
    g = tl.gaps
    if g is None or not len(g):
        return ""
    g = g[(g["cause"] == "unknown").to_numpy()]
    if not len(g):
        return ""
    g = in_steps(g, trace, col="start_us")
    if not len(g):
        return ""
    r = g.loc[g["dur_us"].idxmax()]
    ops = pd.concat(
        [
            t[["ts_us", "name", "stream", "launch_ts_us", "launch_dur_us"]].assign(device=t["device"])
            for t in (trace.kernels, trace.memcpy)
            if len(t)
        ],
        ignore_index=True,
    )
    if tl.device is not None:
        ops = ops[ops["device"].to_numpy() == tl.device]
    ops = ops.sort_values("ts_us", kind="stable")
    i = int(np.searchsorted(ops["ts_us"].to_numpy(), float(r["end_us"]) - 1e-6))
    if i >= len(ops):
        return ""
    op = ops.iloc[i]
    name = str(op["name"])
    name = name if len(name) <= 80 else name[:77] + "..."
    issued = float(op["launch_ts_us"]) + (0.0 if pd.isna(op["launch_dur_us"]) else float(op["launch_dur_us"]))
    early = float(r["start_us"]) - issued if not pd.isna(issued) else 0.0
    when = f", issued {fmt_us(early)} before the GPU went idle" if early >= 100.0 else ""
    return f"; longest wait: {fmt_us(float(r['dur_us']))} before {name} on stream {int(op['stream'])}{when}"


def _verdict(
    trace: Trace, findings: list[Finding], account: Account | None = None, skipped: Sequence[Skipped] = ()
) -> Verdict:
    """The headline, from the same ranked findings and account the report shows: the top cause is the
    first active finding that costs at least VERDICT_MIN_FRAC of the window, and "expected if fixed"
    always includes it."""
    st = trace.steps
    if not len(st):
        return Verdict()
    account = account or Account()
    median = float(st["dur_us"].median())
    unexpl = float(account.get("unexplained_frac_of_step", 0.0))
    causes = [f for f in findings if not f.masked_by and f.time_lost_us > 0 and f.time_lost_frac >= VERDICT_MIN_FRAC]
    latent = [f for f in findings if f.masked_by]
    arts = [a for a in account.get("artifacts", []) if a.frac_of_step >= 0.005]
    art_frac = sum(a.frac_of_step for a in arts)
    cannot = f"{100 * art_frac:.0f}% of the step is GPU idle time this trace cannot attribute: " + "; ".join(
        f"{a.label} ({fmt_us(a.per_step_us)}/step)" for a in arts
    )
    base = {
        "median_step_us": median,
        "unexplained_frac_of_step": unexpl,
        "explained_frac_of_idle": account.get("explained_frac_of_idle"),
        "next_bottlenecks": [f.name for f in latent],
    }
    if not causes:
        if not trace.has_gpu and trace.meta.devices:  # a GPU is named: its events are absent or lost
            headline = (
                f"The trace names {trace.meta.devices[0].name} but holds no GPU events (see the "
                "warnings), so the GPU analyses could not run."
            )
        elif not trace.has_gpu:
            headline = (
                "No GPU activity in this trace, so the GPU analyses could not run: capture with "
                "ProfilerActivity.CUDA on a GPU machine."
            )
        elif art_frac > UNEXPLAINED_MAX_FRAC and art_frac >= unexpl:
            headline = f"No cause found in what this trace shows: {cannot}." + (
                f" A further {100 * unexpl:.0f}% of the step is GPU idle time no finding explains."
                if unexpl > UNEXPLAINED_MAX_FRAC
                else ""
            )
        elif unexpl > UNEXPLAINED_MAX_FRAC:
            why = "; ".join(r.why for r in account.get("unexplained_reasons", [])[:2])
            headline = (
                f"No cause found for {100 * unexpl:.0f}% of the step: the GPU idles "
                f"{fmt_us(account.get('unexplained_per_step_us', 0.0))} per step that no finding explains"
                + (f" ({why})" if why else "")
                + "."
            )
        else:
            headline = "No significant slowdown found in the analysed steps."
        if latent and trace.has_gpu:
            headline += " Next bottleneck once the GPU is the limit: " + ", ".join(f.name for f in latent[:3]) + "."
        return Verdict(top=None, headline=headline, **base)
    top = causes[0]
    fixable = [top] + [f for f in causes[1:] if f.confidence != "low"][:2]
    also = [f"{f.name} ({f.time_lost_per_step_us / 1e3:.1f} ms/step)" for f in fixable[1:]]
    headline = top.title.rstrip(".") + (f". Also: {', '.join(also)}" if also else "")
    if unexpl > UNEXPLAINED_MAX_FRAC:
        headline += f". {100 * unexpl:.0f}% of the step is GPU idle time no finding explains"
    if art_frac > UNEXPLAINED_MAX_FRAC:
        headline += f". {cannot}"
    ids = st["step"].to_numpy() if "step" in st.columns else np.arange(1, len(st) + 1)
    headline += _slow_steps(st["dur_us"].to_numpy(dtype=float), ids) + "."
    path, models, whatif, rediagnosed = _fix_path(trace, findings, fixable, median, skipped)
    expected = path[-1].to_us
    if rediagnosed:
        base["rediagnosed"] = rediagnosed
        base["next_bottlenecks"] = list(dict.fromkeys(base["next_bottlenecks"] + [r.fix for r in rediagnosed]))
    return Verdict(
        **base,
        top=top.name,
        top_title=top.title,
        headline=headline,
        top_per_step_us=top.time_lost_per_step_us,
        top_frac=top.time_lost_frac,
        top_confidence=top.confidence,
        expected_step_us=expected,
        expected_from=[f.name for f in fixable],
        expected_model="+".join(dict.fromkeys(models)),
        path=path,
        whatif=whatif,
        assumption=_assumption(models),
    )


def _slow_steps(dur_us: np.ndarray, steps: np.ndarray) -> str:
    """'. Per-step figures are means over 29 steps (mean step 332.8 ms); the median step is 175.8 ms:
    3 slow steps (#4, #9, #17, each over 1.5x the median) hold 61% of the window', or "" where the mean step
    is within SKEWED_MEAN_RATIO of the median (then mean and median tell the same story)."""
    if not len(dur_us):
        return ""
    median, mean = float(np.median(dur_us)), float(dur_us.mean())
    slow = dur_us > SLOW_STEP_RATIO * median
    if median <= 0 or mean < SKEWED_MEAN_RATIO * median or not slow.any():
        return ""
    k = int(slow.sum())
    names = ", ".join(f"#{int(x)}" for x in steps[slow][:5]) + (f" and {k - 5} more" if k > 5 else "")
    share = float(dur_us[slow].sum() / dur_us.sum())
    return (
        f". Per-step figures are means over {len(dur_us)} steps (mean step {fmt_us(mean)}); the median step "
        f"is {fmt_us(median)}: {k} slow step{'s' if k != 1 else ''} ({names}, each over {SLOW_STEP_RATIO:g}x "
        f"the median) hold{'s' if k == 1 else ''} {100 * share:.0f}% of the window, and the fix path is on the "
        "median step"
    )


def _assumption(models: list[str]) -> str:
    if all(m == whatif.MODEL_REPLAY for m in models):
        return "replay of the trace with each fix applied in rank order, cumulatively (docs/whatif.md)"
    if not any(m == whatif.MODEL_REPLAY for m in models):
        return (
            "estimate: median step time minus the per-step time lost of each cause, assuming they are "
            "independent and each fix recovers its estimate (capped at 90% of the step)"
        )
    return (
        "replay for the fixes that have a transformation, then minus the per-step time lost of the others "
        "(assumed independent, capped at 90% of the step)"
    )


def _fix_path(
    trace: Trace, findings: list[Finding], fixable: list[Finding], median: float, skipped: Sequence[Skipped] = ()
):
    """The cumulative path in rank order. Each fix with a replay transformation is replayed on top of the
    fixes before it; one without is subtracted (projected_step's 90% rule), and each step says which."""
    known = whatif.transforms() if isinstance(trace, Trace) and trace.has_gpu else {}
    path, models, done = [], [], []
    before = median
    sol = whatif.speed_of_light(trace) if known else {}
    floor = sol.get("sol_us") or 0.0
    memo: dict = {}

    def replayed(fixes: tuple):
        if fixes not in memo:
            memo[fixes] = whatif.predict(trace, findings, fixes, with_path=False)
        return memo[fixes]

    gpu_left = float(np.median(replayed(()).floor_us)) if known and len(trace.steps) else 0.0
    for f in fixable:
        if f.name in known:
            done.append(f.name)
            p = replayed(tuple(done))
            to, gpu_left = max(p.median_us, floor), float(np.median(p.floor_us)) if len(p.floor_us) else 0.0
            model = whatif.MODEL_REPLAY
        else:  # no transformation: subtract, but never below the GPU work the replayed fixes leave (the
            # replay's floor, hold.hold), nor above the step it starts from
            to = min(before, max(projected_step(before, f.time_lost_per_step_us), gpu_left, floor))
            model = "subtraction"
        path.append(FixStep(fix=f.name, from_us=before, to_us=to, model=model))
        models.append(model)
        before = to
    extra = UNSET
    if known:
        extra = WhatIf(
            identity=whatif.identity(trace),
            speed_of_light=sol,
            saved_alone_per_step_us={
                f.name: median - whatif.alone(trace, findings, f.name).median_us
                for f in findings
                if f.name in known and not f.masked_by
            },
        )
    return path, models, extra, _rediagnose(findings, skipped, tuple(done), replayed) if known else []


NEXT_MIN_FRAC = 0.03  # a cause asked again after the path is a next bottleneck from this share of the step


def _rediagnose(findings: list[Finding], skipped: Sequence[Skipped], done: tuple, replayed) -> list[Rediagnosed]:
    """Next bottlenecks as a re-diagnosis of the predicted run: after the path's replayed fixes, each
    cause present now that is not on the path (a masked finding, or a detector that saw its signature
    and declined it as below threshold) is replayed once more on top; those whose fix would then save at
    least NEXT_MIN_FRAC of that predicted step are listed, largest first. The cost is the replay's: GPU
    time and launches alike (eager attention in a launch-bound run)."""
    if not done:
        return []
    known = whatif.transforms()
    cands = {f.name: ("masked", f.title) for f in findings if f.masked_by and f.name in known and f.name not in done}
    for s in skipped:
        if s.checked and s.name in known and s.name not in done and s.name not in cands:
            cands[s.name] = ("below threshold", s.reason)
    if not cands:
        return []
    base = replayed(done).median_us
    out = []
    for name, (present, reason) in cands.items():
        to = replayed(done + (name,)).median_us
        saved = base - to
        if base > 0 and saved >= NEXT_MIN_FRAC * base:
            out.append(
                Rediagnosed(
                    fix=name,
                    present=present,
                    reason=reason,
                    after=list(done),
                    from_us=base,
                    to_us=to,
                    saved_per_step_us=saved,
                    share_of_predicted=saved / base,
                )
            )
    out.sort(key=lambda r: -r.saved_per_step_us)
    return out


def _top_kernels(trace: Trace, n: int = 10) -> list[TopKernel]:
    k = trace.kernels
    if not len(k):
        return []
    from .detectors.base import in_steps

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


# --- one path, several ranks ------------------------------------------------------------------------


def analyze_file(path: str, steps: str | None = None, strict: bool = False, warn_default_rank: bool = False) -> dict:
    """Pure function: one trace file -> report dict (what a process pool or Dask maps)."""
    trace = load_trace(path, warn_default_rank=warn_default_rank, jobs=1)  # ranks are the parallel unit
    trace.select_steps(steps)
    rep = analyze(trace, strict=strict)
    out = rep.to_dict()
    # not a report key: the rows reduce_ranks aligns across ranks, dropped once it has run
    out[COLLECTIVES_KEY] = rank_collectives(trace) if trace.has_gpu else []
    # not a report key either: the rank's summary for the job replay (whatif/job.py)
    out[JOB_KEY] = job.rank_summary(trace, list(rep.findings)) if out[COLLECTIVES_KEY] else {}
    return out


COLLECTIVES_KEY = "_collectives"
JOB_KEY = "_job"
ERROR_KEY = "_error"  # a rank file that could not be read (never a key of a report)
STRAGGLER_MIN_FRAC = 0.01  # a rank gates the step when the job loses at least 1% of the median step to it


def _safe_analyze_file(args) -> dict:
    """analyze_file, where a file that cannot be read is a value ({ERROR_KEY: {path, reason, hint}}): one
    bad rank file is skipped with a warning, it does not fail the others. The parts stay separate, so
    the reduction never parses a message."""
    path, steps, strict = args
    try:
        return analyze_file(path, steps, strict, warn_default_rank=True)
    except TraceError as e:
        return {ERROR_KEY: {"path": e.path, "reason": e.reason, "hint": e.hint}}
    except OSError as e:
        return {
            ERROR_KEY: {
                "path": path,
                "reason": f"cannot read the file ({e.strerror or e})",
                "hint": "check the file and its permissions",
            }
        }
    except MemoryError:
        return {
            ERROR_KEY: {
                "path": path,
                "reason": "out of memory while reading it",
                "hint": "analyse this rank on its own, or capture fewer active steps",
            }
        }


def analyze_many(
    paths: Sequence[str],
    *,
    steps: str | None = None,
    strict: bool = False,
    jobs: int | None = None,
    mapper: Callable | None = None,
    keep_rank: int | None = None,
) -> Report:
    """Analyse rank files in parallel and reduce them into one report led by the slowest rank."""
    work = [(str(p), steps, strict) for p in paths]
    if mapper is not None:
        results = list(mapper(_safe_analyze_file, work))
    else:
        jobs = min(jobs or os.cpu_count() or 1, len(work))  # never more workers than files
        if jobs <= 1 or len(work) == 1:
            results = [_safe_analyze_file(w) for w in work]
        else:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                results = list(ex.map(_safe_analyze_file, work))
    if keep_rank is not None:
        for r in results:
            if ERROR_KEY not in r and r["trace"]["rank"] == keep_rank:
                return Report.from_dict(r)
        found = sorted(r["trace"]["rank"] for r in results if ERROR_KEY not in r)
        raise UsageError(f": no such rank among the files (ranks found: {found})", param="rank", value=keep_rank)
    return reduce_ranks(results)


def reduce_ranks(results: list[dict]) -> Report:
    """One report for the job: led by the rank that gates the step (the one most often last to arrive at
    the collectives, weighted by the wait it causes the others) when the collectives can be aligned,
    else by the rank with the slowest median step. The ranks are reduced from their typed reports."""
    ok = [r for r in results if ERROR_KEY not in r]
    bad = [r[ERROR_KEY] for r in results if ERROR_KEY in r]
    if not ok:
        first = bad[0]
        raise TraceError(first["path"], first["reason"], hint=first["hint"])
    colls = [r.pop(COLLECTIVES_KEY, None) or [] for r in ok]
    sums = [r.pop(JOB_KEY, None) or {} for r in ok]
    reps = [Report.from_dict(r) for r in ok]
    # the rank each file claims is known for sure only now (the sniff before the parse reads the
    # head and tail only): two files with the same rank are not one run
    check_one_run(
        [
            RankFile(
                path=Path(r.trace.file),
                rank=r.trace.rank,
                rank_source=known(r.trace.rank_source),
                world_size=known(r.trace.world_size),
                worker=None,
            )
            for r in reps
        ],
        "the rank files",
    )
    order = sorted(range(len(reps)), key=lambda i: reps[i].trace.rank)
    reps = [reps[i] for i in order]
    colls = {reps[k].trace.rank: colls[i] for k, i in enumerate(order)}
    sums = {reps[k].trace.rank: sums[i] for k, i in enumerate(order)}
    med = [r.steps.median_us for r in reps]
    slow = int(np.argmax(med))
    fastest = float(np.min(med))
    cross = align(colls, n_steps=min(int(r.steps.count or 1) for r in reps)) if len(reps) > 1 else CrossRank()
    cross, replayed = _job_replay(cross, colls, sums, reps)
    gate = _gating_rank(cross, reps)
    if replayed is not None:
        cross = msgspec.structs.replace(cross, job=_job_section(replayed, cross, reps, gate))
    lead_i = next(i for i, r in enumerate(reps) if r.trace.rank == gate) if gate is not None else slow
    lead = reps[lead_i]
    per = {p.rank: p for p in cross.get("per_rank", [])}

    def summary(i: int, r: Report) -> RankSummary:
        busy = r.breakdown.get("gpu_busy")
        c = per.get(r.trace.rank)
        return RankSummary(
            rank=r.trace.rank,
            file=r.trace.file,
            median_step_us=r.steps.median_us,
            mean_step_us=r.steps.mean_us,
            steps=r.steps.count,
            gpu_busy_frac=known(busy.frac) if busy else None,
            top_finding=r.findings[0].name if r.findings else None,
            slowest=i == slow,
            **(
                {}
                if c is None
                else {
                    "gating": r.trace.rank == gate,
                    "last_arrivals": c.last_arrivals,
                    "collective_wait_us_per_step": c.wait_us_per_step,
                    "collective_transfer_us_per_step": c.transfer_us_per_step,
                    "clock_offset_us": c.clock_offset_us,
                }
            ),
        )

    lead = msgspec.structs.replace(lead, ranks=[summary(i, r) for i, r in enumerate(reps)])
    warnings = []
    if cross:
        cross = msgspec.structs.replace(cross, gating_rank=gate)
        lead = msgspec.structs.replace(lead, cross_rank=cross)
        if cross.clock != "one clock":
            offs = _clock_groups(cross)
            warnings.append(
                f"the ranks' clocks differ (different hosts, or clocks not synchronised): offsets "
                f"against rank {cross.ranks[0]} estimated from the collectives' end times and "
                f"removed before comparing arrivals ({offs})"
            )
        warnings += cross.notes
    if gate is not None:
        lead = msgspec.structs.replace(lead, verdict=_straggler_verdict(lead, cross, reps[lead_i], med[lead_i]))
    elif len(reps) > 1:
        warnings.insert(
            0,
            (
                f"{len(reps)} ranks analysed; the findings below are rank {reps[slow].trace.rank}'s, the slowest "
                f"(median step {med[slow] / 1e3:.1f} ms vs fastest {fastest / 1e3:.1f} ms, "
                f"{(med[slow] / fastest - 1) * 100 if fastest else 0:.0f}% slower)"
                + (
                    "; no rank gates the collectives ("
                    + (
                        f"arrivals within {fmt_us(cross.max_arrival_skew_us)})"
                        if cross
                        else "no collectives to align across ranks)"
                    )
                    if len(reps) > 1
                    else ""
                )
            ),
        )
    ws = max((known(r.trace.world_size) or 0) for r in reps)
    present = {r.trace.rank for r in reps}
    missing = sorted(set(range(ws)) - present) if ws else []
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
        warnings.insert(
            0,
            f"world size is {ws} but {len(present)} rank file(s) were analysed (missing rank(s): "
            f"{shown}): the rank that gates the step may be one that is absent; add its trace",
        )
    warnings += lead.warnings
    for b in bad:
        warnings.append(f"rank file skipped, {b['path']}: {b['reason']}")
    for i, r in enumerate(reps):  # a rank that was assumed: its rank_source says so, not its warning text
        if i != lead_i and r.trace.rank_source == "default":
            warnings.append(default_rank_warning(r.trace.file))
    return msgspec.structs.replace(lead, warnings=warnings)


MAX_CLOCK_GROUPS = 16  # clocks named in the warning; the table has every rank's offset


def _clock_groups(cross: CrossRank) -> str:
    """The ranks' clock offsets, runs of ranks within the tolerance of each other's clock as one
    ("ranks 0-7 +0.000 ms"): a host's ranks share a clock, and 512 ranks make one line per host."""
    groups: list[list] = []
    for p in cross.per_rank:
        g = groups[-1] if groups else None
        if g and abs(p.clock_offset_us - g[2]) <= cross.clock_tolerance_us:
            g[1] = p.rank
        else:
            groups.append([p.rank, p.rank, p.clock_offset_us])
    said = [
        f"{'rank' if a == b else 'ranks'} {a if a == b else f'{a}-{b}'} {off / 1e3:+.3f} ms"
        for a, b, off in groups[:MAX_CLOCK_GROUPS]
    ]
    if len(groups) > MAX_CLOCK_GROUPS:
        said.append(f"... {len(groups)} clocks in all, every rank's in the collectives table")
    return ", ".join(said)


def _job_replay(cross: CrossRank, colls: dict, sums: dict, reps: list[Report]):
    """(cross, job input): where every aligned rank sent its replay summary, the job replay's cost of each
    rank's delay replaces the arrival-lead estimate in per_rank (one number for "what the job loses to
    this rank": the table, the gating judgement and the headline read it), and the straggler is the rank
    whose delay costs the job most. Else (cross, None), with a note saying why when there were ranks."""
    if not cross:
        return cross, None
    if not all(sums.get(r, {}).get("variants") for r in cross.ranks):
        return msgspec.structs.replace(
            cross, notes=[*cross.notes, "job replay: not every rank's replay could be summarised; not replayed"]
        ), None
    ji = job.job_input(cross, colls, sums)
    try:
        ranks = cross.ranks if len(cross.ranks) <= job.MAX_PACE_RANKS else [cross.straggler]
        costs = job.pace_costs(ji, [r for r in ranks if r is not None])
    except job.OrderError as e:
        return msgspec.structs.replace(cross, notes=[*cross.notes, f"job replay: {e}; not replayed"]), None
    per = [
        msgspec.structs.replace(p, job_cost_us_per_step=max(costs[p.rank], 0.0)) if p.rank in costs else p
        for p in cross.per_rank
    ]
    best = max(per, key=lambda p: (p.job_cost_us_per_step, p.caused_wait_us_per_step))
    straggler = best.rank if best.job_cost_us_per_step > 0 else cross.straggler
    return msgspec.structs.replace(cross, per_rank=per, straggler=straggler), ji


def _job_section(ji, cross: CrossRank, reps: list[Report], gate: int | None):
    """The job replay's section: the gating rank's top cause (else the slowest rank's) fixed on the gating
    rank and on every rank that has it, and the gating rank keeping pace."""
    by_rank = {r.trace.rank: r for r in reps}
    measured = {r: float(by_rank[r].steps.median_us) for r in cross.ranks}
    lead = gate if gate is not None else max(cross.ranks, key=lambda r: measured[r])
    top = known(by_rank[lead].verdict.top) if by_rank[lead].verdict else None
    return job.report(ji, measured, gate, top)


def _gating_rank(cross: CrossRank, reps: list[Report]) -> int | None:
    """The straggler when it costs the job at least STRAGGLER_MIN_FRAC of the median step."""
    s = cross.straggler if cross else None
    if s is None:
        return None
    p = next(p for p in cross.per_rank if p.rank == s)
    median = float(np.median([r.steps.median_us for r in reps]))
    return s if median and p.job_cost_us_per_step >= STRAGGLER_MIN_FRAC * median else None


def _straggler_verdict(lead: Report, cross: CrossRank, rep: Report, median_us: float) -> Verdict:
    """The job's headline: the gating rank, the wait it costs, and its own top cause as the reason."""
    s = cross.straggler
    p = next(p for p in cross.per_rank if p.rank == s)
    others = [q for q in cross.per_rank if q.rank != s]
    mean_wait = float(np.mean([q.wait_us_per_step for q in others])) if others else 0.0
    part = rep.breakdown.get("gpu_busy")
    busy = known(part.frac) if part else None
    v = lead.verdict
    top = known(v.top)
    busy_s = f"{100 * busy:.0f}% GPU busy" if busy is not None else "GPU busy unknown"
    cause = (
        f"The cause is rank {s}'s own: {top}, {busy_s} ({known(v.top_title, '').rstrip('.')})"
        if top
        else f"Rank {s} has no finding of its own ({busy_s}): look at its input pipeline, host and data balance"
    )
    headline = (
        f"Rank {s} gates the step: it is last to arrive at {p.last_arrivals} of {cross.matched} "
        f"collectives, the other ranks wait {fmt_us(mean_wait)} per step on average in collectives, and "
        f"the job loses {fmt_us(p.job_cost_us_per_step)} per step to it. {cause}. The other ranks' "
        f"collective time is waiting for rank {s}, not communication to tune."
    )
    j = known(cross.job)
    if j:
        said = "; ".join(f"{x.what}: {fmt_us(x.step_us)}" for x in j.predictions if x.fix)
        if said:
            headline += f" Replayed as one job (step {fmt_us(j.replayed_step_us)}): {said}."
    return msgspec.structs.replace(
        v,
        headline=headline,
        gating_rank=s,
        gating_cost_per_step_us=p.job_cost_us_per_step,
        gating_caused_wait_per_step_us=p.caused_wait_us_per_step,
        rank_headline=known(v.headline, ""),
    )
