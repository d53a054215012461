"""Run every cause's detector over a Trace (a failing one becomes a Failure), and rank the findings.

Each finding with a replay transformation states its fix alone (whatif.alone); findings that claim idle
time carry the trace-quality warning. Renders nothing; analyze.py builds the report from what this returns.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from typing import Sequence

from . import detectors as registry
from .facts import claims
from .facts import trace_quality
from .detectors.base import Context, Detector, window_label
from .errors import DetectorFailed
from .findings import Evidence, Failure, Finding, Skipped
from .whatif import batch as whatif_batch
from .whatif import engine as whatif
from .trace.model import Trace


MIN_WINDOW_US = 1000.0  # a training step is milliseconds at least; shorter windows are test artifacts

# Ranking: time lost weighted by how sure the estimate is, so a low-confidence guess or an upper bound
# does not head the report over a high-confidence cause of similar size.
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.7, "low": 0.35}
UPPER_BOUND_WEIGHT = 0.8


def rank_score(f: Finding) -> float:
    return f.time_lost_us * CONFIDENCE_WEIGHT.get(f.confidence, 0.5) * (UPPER_BOUND_WEIGHT if f.upper_bound else 1.0)


def rank(findings: list[Finding]) -> list[Finding]:
    """Order the findings by confidence-weighted time lost now. A cause off the critical path now is
    not ranked on what it would cost later: the re-diagnosis of the predicted run says that
    (rediagnose, next bottlenecks)."""
    return sorted(findings, key=lambda f: (-rank_score(f), f.code))


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


def with_replay(trace: Trace, findings: list[Finding]) -> list[Finding]:
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
