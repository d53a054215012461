"""The verdict: the top cause, the fix path (each fix replayed on top of the ones ranked above it), the
re-diagnosis of the predicted run (next bottlenecks) and the expected step. Renders nothing.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .detectors.base import fmt_us, projected_step
from .findings import Finding, Skipped
from .sections import UNSET, FixStep, Rediagnosed, WhatIf
from .report import Account, Verdict
from .whatif import engine as whatif
from .trace.model import Trace


VERDICT_MIN_FRAC = 0.01  # a cause must cost at least 1% of the window to become the verdict
UNEXPLAINED_MAX_FRAC = 0.10  # more unexplained GPU idle than this (of the step) is never "no slowdown"
# The verdict's per-step figures are means over the window (time lost / steps) and its step times are
# medians: where the mean step is this much above the median, slow steps hold the difference, and the
# verdict says which, so a per-step loss is never read against a typical step it does not describe.
SKEWED_MEAN_RATIO = 1.10
SLOW_STEP_RATIO = 1.5  # a step this much above the median step is a slow step


def build_verdict(
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
    path, models, whatif, rediagnosed = fix_path(trace, findings, fixable, median, skipped)
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


def fix_path(
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
    return path, models, extra, rediagnose(findings, skipped, tuple(done), replayed) if known else []


NEXT_MIN_FRAC = 0.03  # a cause asked again after the path is a next bottleneck from this share of the step


def rediagnose(findings: list[Finding], skipped: Sequence[Skipped], done: tuple, replayed) -> list[Rediagnosed]:
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
