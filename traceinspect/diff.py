"""diff(before, after) -> ReportDiff: what changed between two Reports, and whether it is beyond noise.

diff() is pure (two Reports in, one dataclass out). load_saved_report() is the one reader here: it tells
a saved JSON report from a trace file. Renders nothing; never reads trace tables.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import msgspec
import numpy as np

from .errors import TraceError
from .report import Report, known
from .sections import NO_GPU
from .trace.load import GZIP_MAGIC
from .trace.timeline import PARTS

# The standard error of a sample median is ~sqrt(pi/2) = 1.2533 times that of the mean for
# normally distributed step times (large-sample result; a rough but honest noise scale for 3..100 steps).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
NOISE_SE = 2.0  # a change counts as real only beyond 2 combined standard errors (~95%)
SAVED_REPORT_MAX_BYTES = 64 << 20
TOP_MOVES = 10


@dataclass(frozen=True, kw_only=True)
class StepStats:
    n: int
    median_us: float
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    se_median_us: float | None  # None with fewer than 2 steps: no spread to measure
    durations_us: tuple[float, ...] = ()

    @staticmethod
    def of(report: Report) -> "StepStats":
        st = report.steps
        d = np.array([float(r.dur_us) for r in known(st.per_step, [])])  # dur_us is required in a row
        if d.size == 0:
            med = float(known(st.median_us, 0.0))
            n = int(known(st.count, 0))
            std = float(known(st.std_us, 0.0))
            return StepStats(
                n=n,
                median_us=med,
                mean_us=float(known(st.mean_us, med)),
                std_us=std,
                min_us=float(known(st.min_us, med)),
                max_us=float(known(st.max_us, med)),
                se_median_us=MEDIAN_SE_FACTOR * std / math.sqrt(n) if n > 1 else None,
            )
        std = float(d.std(ddof=1)) if d.size > 1 else 0.0
        return StepStats(
            n=int(d.size),
            median_us=float(np.median(d)),
            mean_us=float(d.mean()),
            std_us=std,
            min_us=float(d.min()),
            max_us=float(d.max()),
            se_median_us=MEDIAN_SE_FACTOR * std / math.sqrt(d.size) if d.size > 1 else None,
            durations_us=tuple(float(x) for x in d),
        )


@dataclass(frozen=True, kw_only=True)
class Gate:
    """The --fail-on-regression decision and the sentence that explains it."""

    regressed: bool
    message: str


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """A typed row of a ReportDiff; `row["key"]` reads a field by name, as the JSON form has it."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.__struct_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.__struct_fields__ else default


class DiffSide(Row, frozen=True):
    """One side of the comparison: which report, its steps and its headline numbers."""

    file: str
    window: str
    step_source: Optional[str]
    steps: StepStats
    gpu_busy_frac: Optional[float]
    top_finding: Optional[str]


class StepTime(Row, frozen=True):
    before: float  # median step, us
    after: float


class BreakdownChange(Row, frozen=True):
    part: str
    label: str
    before_us: float  # per step (mean)
    after_us: float
    delta_us: float
    before_frac: float
    after_frac: float


class FindingSide(Row, frozen=True):
    """A finding on one side, its instances added up (a detector may report several)."""

    name: str
    code: str
    title: str
    time_lost_us: float
    time_lost_per_step_us: float
    time_lost_frac: float


class Persisting(Row, frozen=True):
    name: str
    code: str
    title_before: str
    title_after: str
    time_lost_us_before: float
    time_lost_us_after: float
    time_lost_per_step_us_before: float
    time_lost_per_step_us_after: float
    change_per_step_us: float


class Unchecked(Row, frozen=True):
    """Found on one side and not checked on the other (the detector did not apply there, or failed)."""

    name: str
    side: str  # the side that did not check it: "before" | "after"
    reason: str


class KernelMove(Row, frozen=True):
    """A kernel in either top list; None where it is not in that side's list (it may have run below the cut)."""

    name: str
    before_us_per_step: Optional[float]
    after_us_per_step: Optional[float]
    delta_us_per_step: Optional[float]
    calls_before: Optional[int]
    calls_after: Optional[int]


class EnvChange(Row, frozen=True):
    """A difference between the two runs that makes the comparison unfair."""

    field: str
    before: Any  # the trace's own value (a GPU name, a version, a profiler option)
    after: Any
    why: str


class Prediction(Row, frozen=True):
    """The before-report's replay prediction for the findings the after-run resolved, against the measured
    after-median."""

    fixes: list[str]
    predicted_us: float
    measured_us: float
    error_frac: float  # (predicted - measured) / measured
    model: str


class ReportDiff(msgspec.Struct, frozen=True, kw_only=True):
    """What changed between two Reports (immutable); to_dict() is the JSON form (docs/json-schema.md)."""

    before: DiffSide
    after: DiffSide
    step_time_us: StepTime
    speedup: Optional[float]  # before / after median: > 1 is faster
    change_pct: Optional[float]  # (after - before) / before, in percent
    noise_us: Optional[float]  # NOISE_SE x the combined standard error of the two medians
    significant: Optional[bool]  # |after - before| > noise_us; None without a spread on both sides
    breakdown: list[BreakdownChange] = []  # per part: before/after per step, delta
    resolved: list[str] = []
    new: list[str] = []
    persisting: list[Persisting] = []
    unchecked: list[Unchecked] = []  # found on one side, not checked on the other
    resolved_findings: list[FindingSide] = []
    new_findings: list[FindingSide] = []
    kernels: list[KernelMove] = []  # top kernels that moved the most per step
    environment: list[EnvChange] = []  # differences that make the comparison unfair
    warnings: list[str] = []
    prediction: Optional[Prediction] = None  # {} in the JSON when there is none

    def to_dict(self) -> dict[str, Any]:
        d = {f: msgspec.to_builtins(getattr(self, f)) for f in self.__struct_fields__}
        if d["prediction"] is None:
            d["prediction"] = {}
        return {"diff_schema_version": 1, **d}

    def regression(self, pct: float) -> Gate:
        """Regressed when the after-median exceeds the before-median by more than pct percent AND
        (with at least two steps on each side) by more than the step-to-step noise."""
        b, a = self.step_time_us.before, self.step_time_us.after
        if not b:
            return Gate(regressed=False, message="fail-on-regression: no step time before; nothing to compare")
        delta = a - b
        change = 100.0 * delta / b
        head = (
            f"fail-on-regression: median step {b / 1e3:.2f} ms -> {a / 1e3:.2f} ms "
            f"({change:+.1f}%, threshold +{pct:g}%)"
        )
        if delta <= b * pct / 100.0:
            return Gate(regressed=False, message=f"{head}: ok")
        if self.noise_us is None:
            return Gate(
                regressed=True,
                message=(
                    f"{head}: REGRESSION (fewer than 2 steps on a side, "
                    "so step-to-step noise could not be taken into account)"
                ),
            )
        if delta <= self.noise_us:
            return Gate(
                regressed=False,
                message=(
                    f"{head}: within step-to-step noise ({self.noise_us / 1e3:.2f} ms = {NOISE_SE:g}x the combined "
                    f"standard error of the two medians), not counted as a regression"
                ),
            )
        return Gate(
            regressed=True,
            message=(
                f"{head}: REGRESSION (beyond the threshold and beyond step-to-step noise of "
                f"{self.noise_us / 1e3:.2f} ms = {NOISE_SE:g}x the combined standard error of the two medians)"
            ),
        )


def diff(before: Report, after: Report) -> ReportDiff:
    sb, sa = StepStats.of(before), StepStats.of(after)
    b, a = sb.median_us, sa.median_us
    noise = None
    if sb.se_median_us is not None and sa.se_median_us is not None:
        noise = NOISE_SE * math.hypot(sb.se_median_us, sa.se_median_us)
    fb, fa = _by_name(before), _by_name(after)
    unchecked_after = _unchecked(after)
    unchecked_before = _unchecked(before)
    resolved, new, persisting, unchecked = [], [], [], []
    for name, f in fb.items():
        if name in fa:
            g = fa[name]
            persisting.append(
                Persisting(
                    name=name,
                    code=f.code,
                    title_before=f.title,
                    title_after=g.title,
                    time_lost_us_before=f.time_lost_us,
                    time_lost_us_after=g.time_lost_us,
                    time_lost_per_step_us_before=f.time_lost_per_step_us,
                    time_lost_per_step_us_after=g.time_lost_per_step_us,
                    change_per_step_us=g.time_lost_per_step_us - f.time_lost_per_step_us,
                )
            )
        elif f.code in unchecked_after:
            unchecked.append(Unchecked(name=name, side="after", reason=unchecked_after[f.code]))
        else:
            resolved.append(f)
    for name, g in fa.items():
        if name in fb:
            continue
        if g.code in unchecked_before:
            unchecked.append(Unchecked(name=name, side="before", reason=unchecked_before[g.code]))
        else:
            new.append(g)
    return ReportDiff(
        before=_side(before, sb),
        after=_side(after, sa),
        step_time_us=StepTime(before=b, after=a),
        speedup=(b / a) if a else None,
        change_pct=(100.0 * (a - b) / b) if b else None,
        noise_us=noise,
        significant=None if noise is None else abs(a - b) > noise,
        breakdown=_breakdown(before, after),
        resolved=[f.name for f in resolved],
        new=[g.name for g in new],
        persisting=persisting,
        unchecked=unchecked,
        resolved_findings=resolved,
        new_findings=new,
        kernels=_kernels(before, after, sb.n, sa.n),
        environment=_environment(before, after),
        warnings=_warnings(sb, sa),
        prediction=_prediction(before, [f.name for f in resolved], a),
    )


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _prediction(before: Report, resolved: list[str], after_us: float) -> Prediction | None:
    """What the before-report's replay predicted for fixing exactly the resolved findings: one fix alone
    (its replay saved_alone), or a prefix of the verdict's cumulative path. A saved report's types are checked on
    read; a value that is not finite (NaN, inf) is no prediction."""
    v = before.verdict
    w = known(v.whatif)
    alone = w.saved_alone_per_step_us if w else {}
    path = known(v.path, [])
    median = _num(v.median_step_us)
    replayable = [n for n in resolved if n in alone or any(p.fix == n for p in path)]
    if not replayable or median is None or not after_us:
        return None
    pred = None
    if len(replayable) == 1 and _num(alone.get(replayable[0])) is not None:
        pred = median - _num(alone[replayable[0]])
    else:
        names = [p.fix for p in path]
        k = len(replayable)
        if set(names[:k]) == set(replayable) and all(p.model == "replay" for p in path[:k]):
            pred = _num(path[k - 1].to_us)
    if pred is None:
        return None
    return Prediction(
        fixes=replayable,
        predicted_us=pred,
        measured_us=after_us,
        error_frac=(pred - after_us) / after_us,
        model="replay",
    )


def _side(r: Report, s: StepStats) -> DiffSide:
    busy = r.breakdown.get("gpu_busy")
    return DiffSide(
        file=known(r.trace.file, "?"),
        window=known(r.trace.window, ""),
        step_source=known(r.steps.source),
        steps=s,
        gpu_busy_frac=known(busy.frac) if busy else None,
        top_finding=r.findings[0].name if r.findings else None,
    )


def _by_name(r: Report) -> dict[str, FindingSide]:
    """Findings keyed by name (a detector may report several; their time lost adds up), worst first."""
    out: dict[str, FindingSide] = {}
    for f in r.findings:
        g = out.get(f.name)
        out[f.name] = (
            FindingSide(
                name=f.name,
                code=f.code,
                title=f.title,
                time_lost_us=f.time_lost_us,
                time_lost_per_step_us=f.time_lost_per_step_us,
                time_lost_frac=f.time_lost_frac,
            )
            if g is None
            else msgspec.structs.replace(
                g,
                time_lost_us=g.time_lost_us + f.time_lost_us,
                time_lost_per_step_us=g.time_lost_per_step_us + f.time_lost_per_step_us,
                time_lost_frac=g.time_lost_frac + f.time_lost_frac,
            )
        )
    return dict(sorted(out.items(), key=lambda kv: (-kv[1].time_lost_us, kv[0])))


def _unchecked(r: Report) -> dict[str, str]:
    out = {s.code: f"not applicable: {s.reason}" for s in r.skipped if not s.checked}  # checked: below threshold
    out.update({f.code: f"detector failed: {f.error}" for f in r.failures})
    return out


def _breakdown(before: Report, after: Report) -> list[BreakdownChange]:
    rows = []
    for p in PARTS + ("gpu_busy",):
        x, y = before.breakdown.get(p), after.breakdown.get(p)
        if not x and not y:
            continue
        bu, au = float(x.per_step_us if x else 0.0), float(y.per_step_us if y else 0.0)
        rows.append(
            BreakdownChange(
                part=p,
                label=(x or y).label or p,
                before_us=bu,
                after_us=au,
                delta_us=au - bu,
                before_frac=float(x.frac if x else 0.0),
                after_frac=float(y.frac if y else 0.0),
            )
        )
    return rows


def _kernels(before: Report, after: Report, nb: int, na: int) -> list[KernelMove]:
    """Per-step kernel time of the kernels in either top list; a kernel outside one list is None there
    (it may still have run, below the cut), so its delta is None rather than a made-up number."""
    kb = {k.name: k for k in before.top_kernels}
    ka = {k.name: k for k in after.top_kernels}
    rows = []
    for name in dict.fromkeys(list(kb) + list(ka)):
        x, y = kb.get(name), ka.get(name)
        bu = x.total_us / nb if x and nb else None
        au = y.total_us / na if y and na else None
        rows.append(
            KernelMove(
                name=name,
                before_us_per_step=bu,
                after_us_per_step=au,
                delta_us_per_step=(au - bu) if bu is not None and au is not None else None,
                calls_before=x.count if x else None,
                calls_after=y.count if y else None,
            )
        )
    rows.sort(
        key=lambda r: (
            -abs(
                r.delta_us_per_step
                if r.delta_us_per_step is not None
                else (r.before_us_per_step or r.after_us_per_step or 0.0)
            ),
            r.name,
        )
    )
    return rows[:TOP_MOVES]


def _environment(before: Report, after: Report) -> list[EnvChange]:
    tb, ta = before.trace, after.trace
    gb, ga = known(tb.gpu) or NO_GPU, known(ta.gpu) or NO_GPU
    checks = [
        ("GPU", gb.name or None, ga.name or None, "different hardware: step times are not comparable"),
        ("GPU architecture", gb.arch, ga.arch, "different hardware"),
        ("GPUs in trace", known(tb.gpu_count_in_trace), known(ta.gpu_count_in_trace), "a different device setup"),
        ("rank", known(tb.rank), known(ta.rank), "different ranks can do different work"),
        ("world size", known(tb.world_size), known(ta.world_size), "a different parallel setup"),
        (
            "step source",
            known(before.steps.source),
            known(after.steps.source),
            "steps were found differently, so a 'step' may not cover the same work",
        ),
        ("framework", known(tb.framework), known(ta.framework), "a different training loop"),
        (
            "ranks analysed",
            len(before.ranks) or 1,
            len(after.ranks) or 1,
            "one side is a multi-rank reduction (its slowest rank) and the other a single rank",
        ),
        ("report schema", before.schema_version, after.schema_version, "reports from different traceinspect versions"),
    ]
    vb, va = known(tb.versions) or {}, known(ta.versions) or {}  # free-form maps: the trace's own keys
    for key in sorted(set(vb) | set(va)):
        checks.append((f"version: {key}", vb.get(key), va.get(key), "a different software stack"))
    pb, pa = known(tb.profiler) or {}, known(ta.profiler) or {}
    for key in sorted(set(pb) | set(pa)):
        checks.append(
            (
                f"profiler option: {key}",
                pb.get(key),
                pa.get(key),
                "profiler options change its overhead (record_shapes, with_stack and profile_memory slow steps)",
            )
        )
    # None is "the trace does not say": unknown -> known (or back) is not a change
    return [
        EnvChange(field=f, before=x, after=y, why=why)
        for f, x, y, why in checks
        if x != y and x is not None and y is not None
    ]


def _warnings(sb: StepStats, sa: StepStats) -> list[str]:
    out = []
    for side, s in (("before", sb), ("after", sa)):
        if s.n == 0:
            out.append(f"{side}: no steps were found; step times cannot be compared")
        elif s.n < 3:
            out.append(f"{side}: only {s.n} step(s); the noise estimate is unreliable (capture more active steps)")
    return out


# --- reading one side of `traceinspect diff` --------------------------------------------------------


def is_saved_report(doc: Any) -> bool:
    """A JSON object written by `traceinspect analyze --format json` (not a Kineto trace)."""
    return isinstance(doc, dict) and "schema_version" in doc and "findings" in doc and "traceEvents" not in doc


def load_saved_report(path: str | Path) -> Report | None:
    """The Report saved in `path`, or None when `path` is not a saved report (then it is a trace)."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size > SAVED_REPORT_MAX_BYTES:
        return None
    data = p.read_bytes()
    if data[:2] == GZIP_MAGIC or b'"traceEvents"' in data:  # gzip or Kineto: a trace
        return None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # let the trace loader say what is wrong with the file
    if not is_saved_report(doc):
        return None
    try:
        return Report.from_dict(doc)  # checks the type of every key that diff and the renderers read
    except ValueError as e:
        raise TraceError(
            str(path),
            f"is a saved traceinspect report of the wrong shape: {e}",
            hint="write it again with: traceinspect analyze TRACE --format json -o report.json",
        ) from None
