"""Run every detector over a Trace (a failing one becomes a Failure), rank, and build the Report.

The multi-rank path (one report for a folder of rank files) is multirank.py. Renders nothing.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from typing import Sequence

import numpy as np
import pandas as pd

from . import detectors as registry
from .facts import claims
from .facts import trace_quality
from .detectors.base import Context, Detector, fmt_us, in_steps, projected_step, window_label
from .facts.efficiency import section as efficiency_section
from .facts.steps import idle_in_steps
from .facts.memory_fit import memory_section
from .errors import DetectorFailed
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
    Efficiency,
    Gpu,
    Memory,
    Peaks,
    Part,
    Report,
    StepRow,
    Steps,
    TopKernel,
    TraceInfo,
    TraceQuality,
    Verdict,
)
from .timeline_sample import representative_step
from .whatif import batch as whatif_batch
from .whatif import engine as whatif
from .trace.model import Trace
from .trace import intervals as iv
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

# the detector that claims each idle part (the account says why a part stayed unexplained)
PART_OWNER = claims.PART_OWNER  # facts/claims.py resolves who claims what


def rank_score(f: Finding) -> float:
    return f.time_lost_us * CONFIDENCE_WEIGHT.get(f.confidence, 0.5) * (UPPER_BOUND_WEIGHT if f.upper_bound else 1.0)


def rank(findings: list[Finding]) -> list[Finding]:
    """Order the findings by confidence-weighted time lost now. A cause off the critical path now is
    not ranked on what it would cost later: the re-diagnosis of the predicted run says that
    (_rediagnose, next bottlenecks)."""
    return sorted(findings, key=lambda f: (-rank_score(f), f.code))


def _memory(trace: Trace, findings: list[Finding]) -> Memory:
    """The memory section, with the batch growth the launch-bound fix recommends (one sizing, one number)."""
    if any(f.name == "launch-bound" for f in findings):
        plan = whatif_batch.batch_plan(trace)
        if plan.fit is not None:
            return memory_section(trace, plan.fit, "launch-bound (replay of the larger-batch fix)")
    return memory_section(trace)


def detector_context(trace: Trace) -> Context:
    """The facts detectors share, with the run's batch plan (sized by the replay, whatif/batch.py)."""
    return Context.of(
        trace,
        batch_plan=lambda: whatif_batch.batch_plan(trace),
        replayed_saving=lambda kin, delta: whatif.step_saving(trace, kin, delta),
    )


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
        if not f.idle_claims_us:
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
    per_step = _account_per_step(trace, [f for f in findings if f.idle_claims_us], artifact_steps)
    busy_causes = [
        BusyCause(
            name=f.name,
            code=f.code,
            us=f.time_lost_us - sum(f.idle_claims_us.values()),
            per_step_us=(f.time_lost_us - sum(f.idle_claims_us.values())) / n,
        )
        for f in findings
        if f.time_lost_us - sum(f.idle_claims_us.values()) > 1e-6
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
    causes = [f for f in findings if f.time_lost_us > 0 and f.time_lost_frac >= VERDICT_MIN_FRAC]
    arts = [a for a in account.get("artifacts", []) if a.frac_of_step >= 0.005]
    art_frac = sum(a.frac_of_step for a in arts)
    cannot = f"{100 * art_frac:.0f}% of the step is GPU idle time this trace cannot attribute: " + "; ".join(
        f"{a.label} ({fmt_us(a.per_step_us)}/step)" for a in arts
    )
    base = {
        "median_step_us": median,
        "unexplained_frac_of_step": unexpl,
        "explained_frac_of_idle": account.get("explained_frac_of_idle"),
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
        base["next_bottlenecks"] = [r.fix for r in rediagnosed]
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
    # the path's latest applied fixes: the next step and each candidate on top of the path continue from
    # a copy of its graph (one graph held, not one per prefix; the same graphs as applying from scratch)
    last: list = [None]

    def replayed(fixes: tuple):
        if fixes not in memo:
            a = last[0]
            start = a if a is not None and fixes[: len(a.fixes)] == a.fixes else None
            applied = whatif.apply(trace, findings, fixes, start=start)
            memo[fixes] = whatif.predict_applied(trace, applied)
            if fixes == tuple(done):
                last[0] = applied
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
                f.name: median - whatif.alone(trace, findings, f.name).median_us for f in findings if f.name in known
            },
        )
    return path, models, extra, _rediagnose(findings, skipped, tuple(done), replayed) if known else []


NEXT_MIN_FRAC = 0.03  # a cause asked again after the path is a next bottleneck from this share of the step


def _rediagnose(findings: list[Finding], skipped: Sequence[Skipped], done: tuple, replayed) -> list[Rediagnosed]:
    """Next bottlenecks as a re-diagnosis of the predicted run: after the path's replayed fixes, each
    cause present now that is not on the path (a finding not on it: one whose GPU saving is off the
    critical path now, or one ranked below it; or a detector that saw its signature and declined it as
    below threshold) is replayed once more on top; those whose fix would then save at least NEXT_MIN_FRAC of that predicted step are listed,
    largest first. The cost is the replay's: GPU time and launches alike (eager attention in a
    launch-bound run). The one mechanism for what a cause costs later: no detector estimates it."""
    if not done:
        return []
    known = whatif.transforms()
    cands = {f.name: ("reported", f.title) for f in findings if f.name in known and f.name not in done}
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
