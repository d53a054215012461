"""The explained-time account: which cause claims each part of the GPU's idle time, what is left
unexplained and why, and the measurement artifacts (profiler blind time) set apart. Renders nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .facts import claims
from .facts import trace_quality
from .detectors.base import fmt_us, in_steps
from .facts.steps import idle_in_steps
from .findings import Finding, Skipped
from .sections import UNSET, AccountArtifact, AccountPart, AccountStep, BusyCause, UnexplainedReason
from .report import Account, Part
from .causes import MIN_WINDOW_US
from .trace.model import Trace
from .trace import intervals as iv
from .trace.timeline import IDLE_PARTS


# the detector that claims each idle part (the account says why a part stayed unexplained)
PART_OWNER = claims.PART_OWNER  # facts/claims.py resolves who claims what


def build_account(trace: Trace, findings: list[Finding], skipped: list[Skipped], breakdown: dict[str, Part]) -> Account:
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
