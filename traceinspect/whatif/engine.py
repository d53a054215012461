"""What-if: apply detector fixes to the replay graph, replay, and read off the predicted step times, the
critical path, the floor the fixes leave and the speed of light.

Owns the prediction and its provenance (which model made each number). Must not render. Detectors own
their transformations (`Detector.whatif(graph, finding) -> str`); this module only looks them up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import detectors as registry
from ..facts.efficiency import coverage, shape_table, shapes_advice
from ..facts.steps import in_steps
from ..findings import Finding
from ..trace.model import Trace
from ..trace.roofline import MATRIX_FAMILIES
from ..trace.tables import name_flags
from ..sections import Identity, ReplayEdges, SpeedOfLight, WhatIfRun, WhatIfStep
from .graph import Graph
from .hold import gpu_lag, graph_of, hold, identity_replay, replay_steps  # noqa: F401 (gpu_lag: re-exported)
from .replay import critical_path, replay

MODEL_REPLAY = "replay"
MIN_SOL_COVERAGE = 0.5  # share of kernel time with modelled shapes below which no speed of light is given


@dataclass
class Prediction:
    fixes: tuple[str, ...]
    step_us: np.ndarray  # predicted, per analysed step
    replay_us: np.ndarray  # the replay before the GPU-work floor
    floor_us: np.ndarray  # per step: the step with no host time left, the GPU work alone (hold.hold)
    work_us: np.ndarray  # per step: the busiest stream's GPU work launched in it
    models: dict  # fix name -> the transformation's stated model
    path: dict  # critical path composition (us over the window)
    notes: list = field(default_factory=list)
    base_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: the unmodified graph's replay, held
    measured_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: as measured

    @property
    def median_us(self) -> float:
        """The predicted typical step: the measured median step less the mean per-step saving (the
        replay of the window without the fixes less its replay with them, over its steps), held at the
        median GPU floor.

        Not the median of the predicted steps: step boundaries are host markers, and a fix can move GPU
        work from one step into the next, which in an uneven window moves the median of the steps by
        up to the difference between them while the window gets shorter (HTA trace_diff/test: 114.7 ms
        measured, the median of the predicted steps 119.7 ms, the window 5% shorter). A saving spread
        over the window's steps does not depend on where the step markers cut it; it is the same mean
        per step as the time lost the report's breakdown states; and measured against the replay of the
        same graph, the identity replay's own error cancels."""
        n = len(self.step_us)
        if not n:
            return 0.0
        if len(self.base_us) != n or len(self.measured_us) != n:
            return float(np.median(self.step_us))
        v = float(np.median(self.measured_us) - np.mean(self.base_us - self.step_us))
        return max(v, float(np.median(self.floor_us))) if len(self.floor_us) == n else v


def transforms() -> dict:
    """Fix name -> detector class, for every detector that knows its fix as a graph transformation."""
    return {d.name: d for d in registry.ALL if callable(getattr(d, "whatif", None))}


def identity(trace: Trace) -> Identity:
    """The replay of the unmodified graph against the measured steps: the model's own error."""
    r = identity_replay(trace)
    meas = trace.steps["dur_us"].to_numpy(float)
    if len(r.step_us) != len(meas) or not len(meas):
        return Identity()
    err = np.abs(r.step_us - meas) / np.where(meas > 0, meas, 1.0)
    return Identity(
        median_error_frac=float(np.median(err)),
        max_error_frac=float(err.max()),
        replayed_median_us=float(np.median(r.step_us)),
        measured_median_us=float(np.median(meas)),
        edges=edge_counts(graph_of(trace)),
    )


def edge_counts(g: Graph) -> ReplayEdges:
    """Where the graph's cross-stream, host-wait and cross-thread edges came from (docs/whatif.md, Edges)."""
    e = g.edges
    return ReplayEdges(
        recorded=int(e.recorded),
        inferred=int(e.inferred),
        recorded_share=None if e.recorded_share is None else float(e.recorded_share),
        cross_stream_recorded=int(e.cross_stream_recorded),
        cross_stream_inferred=int(e.cross_stream_inferred),
        host_wait_recorded=int(e.host_wait_recorded),
        host_wait_inferred=int(e.host_wait_inferred),
        cross_thread_inferred=int(e.cross_thread_inferred),
        stream_waits_complete=bool(e.stream_waits_complete),
        contradicted=int(e.contradicted),
    )


def valid_fix(name: str) -> bool:
    """NAME or NAME:VARIANT of a detector with a transformation (and that variant, e.g. launch-bound:batch)."""
    base, _, variant = name.partition(":")
    cls = transforms().get(base)
    if cls is None:
        return False
    variants = getattr(cls, "variants", ())
    if variant.startswith("batch=") and "batch" in variants:
        from ..detectors.launch_bound import batch_variant_factor

        return batch_variant_factor(variant) is not None
    return not variant or variant in variants


@dataclass
class Applied:
    """A graph with fixes applied (in order), their stated models and what could not be applied: the
    start a longer fix list continues from (the fix path's next step, a candidate on top of the path)
    instead of applying every fix again to a fresh copy of the measured graph."""

    fixes: tuple[str, ...]
    graph: Graph
    models: dict
    notes: list


def predict(
    trace: Trace,
    findings: list[Finding],
    fixes: tuple[str, ...],
    *,
    with_path: bool = True,
    recommended: bool = True,
    start: Applied | None = None,
) -> Prediction:
    """Apply the named fixes (in order) to the measured graph and replay. A fix whose detector did not
    fire has nothing to change (its finding is what the transformation scales). NAME:VARIANT selects a
    variant; a plain NAME gets the variant its finding's fix recommends (`recommended_variant`) unless
    `recommended` is False (`traceinspect whatif`: the detector's default variant). start: the fixes
    already applied (a prefix of `fixes`), continued from a copy of its graph."""
    return predict_applied(trace, apply(trace, findings, fixes, recommended=recommended, start=start), with_path)


def predict_applied(trace: Trace, a: Applied, with_path: bool = False) -> Prediction:
    """Replay a graph with its fixes applied (apply), with the GPU-work hold, into a Prediction."""
    base = graph_of(trace)
    g, notes = a.graph, list(a.notes)
    same = g is base or _same_replay_inputs(g, base)  # fixes that change nothing replay as the identity
    r = identity_replay(trace) if same else replay(g)
    steps, floor, work = hold(g, r)
    if (steps > r.step_us + 1.0).any():
        notes.append(
            "the host would run ahead of the GPU by more than the measured window shows: those steps are "
            "held at the GPU work they keep"
        )
    return Prediction(
        fixes=a.fixes,
        step_us=steps,
        replay_us=r.step_us,
        floor_us=floor,
        work_us=work,
        models=dict(a.models),
        path=critical_path(g, r) if with_path else {},
        notes=notes,
        base_us=steps if same else identity_steps(trace),
        measured_us=trace.steps["dur_us"].to_numpy(float),
    )


def identity_steps(trace: Trace) -> np.ndarray:
    """Per analysed step: the unmodified graph's replay, held (what a fix's replay is measured against)."""
    return trace.memo("whatif identity held", lambda: hold(graph_of(trace), identity_replay(trace))[0])


def apply(
    trace: Trace,
    findings: list[Finding],
    fixes: tuple[str, ...],
    *,
    recommended: bool = True,
    start: Applied | None = None,
) -> Applied:
    """The named fixes applied in order to a copy of the measured graph, or, given start (whose fixes are
    a prefix of these), the rest applied to a copy of start's graph: the same graph, since each
    transformation is a function of the graph it is given and its finding. The measured graph itself,
    not a copy, when there is no fix."""
    fixes = tuple(fixes)
    if start is not None and start.fixes != fixes[: len(start.fixes)]:
        raise ValueError(f"start {start.fixes} is not a prefix of {fixes}")
    done = start.fixes if start is not None else ()
    rest = fixes[len(done) :]
    src = start.graph if start is not None else graph_of(trace)
    g = src.copy() if rest else src
    models = dict(start.models) if start is not None else {}
    notes = list(start.notes) if start is not None else []
    by_name = {f.name: f for f in findings}
    known = transforms()
    for name in rest:
        key, _, variant = name.partition(":")
        cls = known.get(key)
        if cls is None:
            notes.append(f"{name}: no replay transformation")
            continue
        finding = by_name.get(key)
        if not variant and recommended and hasattr(cls, "recommended_variant"):
            variant = cls.recommended_variant(finding)
        if variant == "batch":  # the batch-size fix at the run's one recommended factor (whatif/batch.py)
            from .batch import batch_plan

            variant = f"batch={batch_plan(trace).factor}"
        models[name] = cls().whatif(g, finding, variant) if variant else cls().whatif(g, finding)
    return Applied(fixes=fixes, graph=g, models=models, notes=notes)


def alone(trace: Trace, findings: list[Finding], name: str) -> Prediction:
    """The replay with one fix alone (its recommended variant), computed once per trace and finding set:
    the number a finding's evidence and the verdict's saved-alone costs both read."""
    key = ("whatif alone", name, tuple((f.name, f.fix, f.time_lost_per_step_us) for f in findings))
    return trace.memo(key, lambda: predict(trace, findings, (name,), with_path=False))


# what replay() reads off a graph: a fix set that leaves all of them equal replays as the unmodified graph
_REPLAY_INPUTS = (
    "h_ts",
    "h_end",
    "g_ts",
    "g_end",
    "h_prev",
    "h_gap",
    "h_xprev",
    "h_xgap",
    "h_own",
    "h_wait",
    "h_resid",
    "g_launch",
    "g_prev",
    "g_xprev",
    "g_slack",
    "g_lat",
    "g_dur",
    "markers",
    "m_end",
)


def _same_replay_inputs(g: Graph, base: Graph) -> bool:
    for f in _REPLAY_INPUTS:
        a, b = getattr(g, f), getattr(base, f)
        if a is not b and not (np.shape(a) == np.shape(b) and np.array_equal(a, b)):
            return False
    return True


def speed_of_light(trace: Trace) -> SpeedOfLight:
    """Per step, the roofline floor of the GPU work: every op the efficiency table models at the larger of
    its FLOPs at peak and its bytes at bandwidth (its `roofline_us_per_step`), never more than it took;
    the kernels the table does not model at their measured time; the sum scaled by the measured overlap
    of the step's kernels (busy time over kernel time, 1 on one stream). MFU is the separate matrix figure:
    GEMM / convolution / attention FLOPs (direct count) at the peak for their dtype over the median step.
    Says what is missing rather than guessing."""
    if not trace.has_gpu or not len(trace.steps):
        return SpeedOfLight()
    dev = trace.device
    if dev is None or dev.peaks is None:
        return SpeedOfLight(
            sol_us=None, why="the GPU's peak throughput is unknown (no deviceProperties or unknown model)"
        )
    table = shape_table(trace)
    modelled = [r for r in table if r.roofline_us_per_step is not None]
    if not modelled:
        return SpeedOfLight(sol_us=None, why=f"no op the model covers; {shapes_advice(trace)}")
    rows = [r for r in modelled if r.family in MATRIX_FAMILIES]
    flops = sum(r.gflops_per_call * 1e9 * r.calls_per_step for r in rows)
    matrix_at_peak = sum(r.gflops_per_call * 1e9 * r.calls_per_step / (r.peak_tflops * 1e12) * 1e6 for r in rows)
    median = float(trace.steps["dur_us"].median())
    cov = coverage(trace)
    frac = cov.get("modelled_frac", 0.0)
    if frac < MIN_SOL_COVERAGE:  # most kernel time has no model: a floor from the rest would be a guess
        return SpeedOfLight(
            sol_us=None,
            matrix_flops_per_step=float(flops),
            modelled_kernel_frac=float(frac),
            why=f"only {100 * frac:.0f}% of the kernel time is in ops the model covers; {shapes_advice(trace)}",
        )
    # a row's floor is never above its measurement: cuDNN's Winograd 3x3 convolutions beat the direct count
    roof = sum(min(r.roofline_us_per_step, r.gpu_us_per_step) for r in modelled)
    kernel_us = cov.get("kernel_us_per_step", 0.0)
    unmodelled = max(kernel_us - sum(r.gpu_us_per_step for r in modelled), 0.0)
    overlap = _overlap(trace, kernel_us)
    return SpeedOfLight(
        sol_us=float((roof + unmodelled) * overlap),
        roofline_us=float(roof),
        unmodelled_us=float(unmodelled),
        overlap=float(overlap),
        matrix_flops_per_step=float(flops),
        achieved_tflops=float(flops / median / 1e6),
        mfu=float(matrix_at_peak / median) if median and flops > 0 else None,
        modelled_kernel_frac=float(frac),
        why="",
        **_flops_cross_check(trace, flops),
    )


def _overlap(trace: Trace, kernel_us_per_step: float) -> float:
    """The step kernels' busy time (their union) over their summed time: 1 where one stream runs them,
    below 1 where streams overlap. The floor of a sum of kernel floors is scaled by it."""
    from ..facts.efficiency import compute_kernels
    from ..trace.intervals import total, union

    k = compute_kernels(trace)
    if not len(k) or kernel_us_per_step <= 0:
        return 1.0
    busy = total(union(k["ts_us"].to_numpy(), k["end_us"].to_numpy())) / max(len(trace.steps), 1)
    return min(1.0, busy / kernel_us_per_step)


# ops on which torch.profiler(with_flops=True) records a `flops` arg for matrix math (GEMM, batched GEMM,
# convolution: torch/autograd/profiler_util.py and torch/csrc/profiler/util.cpp computeFlops)
RECORDED_MATRIX_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution",
        "aten::_convolution",
    }
)


def recorded_flops(trace: Trace) -> pd.DataFrame | None:
    """The matrix ops (RECORDED_MATRIX_OPS) of `trace.cpu_ops` that carry the `flops` arg
    torch.profiler(with_flops=True) recorded, in table order: `name`, `ts_us`, `flops` (the tables read
    the arg with every other field, trace/fields.py); None when the trace does not say it was captured
    with_flops."""
    if trace.meta.profiler.get("with_flops") is not True:
        return None
    ops = trace.cpu_ops
    flops = ops["flops"].to_numpy()
    # vectorised: the name test runs once per distinct name, not once per op
    keep = ~np.isnan(flops) & name_flags(ops["name"], RECORDED_MATRIX_OPS)
    return ops.loc[keep, ["name", "ts_us", "flops"]]


def _flops_cross_check(trace: Trace, model_flops: float) -> dict:
    """The profiler's own FLOPs per step (the `flops` args of the matrix ops in the analysed steps) and
    their ratio to the shape model's, where the trace records them."""
    rec = recorded_flops(trace)
    if rec is None or not len(rec):
        return {}
    # summed one by one in table order (not numpy's pairwise sum): the same float as before the
    # column existed, when the ops were added up in this order
    total = sum(in_steps(rec, trace)["flops"].tolist())
    per_step = total / max(len(trace.steps), 1)
    if per_step <= 0:
        return {}
    return {
        "recorded_flops_per_step": float(per_step),
        "recorded_vs_model": float(per_step / model_flops) if model_flops > 0 else None,
    }


def path(trace: Trace, findings: list[Finding], order: list[str]) -> list[dict]:
    """The cumulative path in rank order: fix 1, then fix 1 + 2, ..., each a replay."""
    out, done = [], []
    before = float(trace.steps["dur_us"].median())
    for name in order:
        done.append(name)
        p = predict(trace, findings, tuple(done))
        out.append({"fix": name, "from_us": before, "to_us": p.median_us, "model": MODEL_REPLAY})
        before = p.median_us
    return out


def summary(trace: Trace, findings: list[Finding], fixes: tuple[str, ...]) -> WhatIfRun:
    """`traceinspect whatif`: measured vs predicted per step, the critical path, the floor, the models."""
    p = predict(trace, findings, fixes, recommended=False)
    meas = trace.steps["dur_us"].to_numpy(float)
    fired = {f.name for f in findings}
    return WhatIfRun(
        fixes=list(fixes),
        models=dict(p.models),
        model=MODEL_REPLAY,
        not_found=[n for n in fixes if n.partition(":")[0] not in fired],
        steps=[
            WhatIfStep(
                step=int(s),
                measured_us=float(m),
                predicted_us=float(q),
                gpu_work_us=float(w),
                gpu_floor_us=float(fl),
            )
            for s, m, q, w, fl in zip(trace.steps["step"], meas, p.step_us, p.work_us, p.floor_us)
        ],
        measured_median_us=float(np.median(meas)) if len(meas) else 0.0,
        predicted_median_us=float(p.median_us),
        critical_path_us={k: float(v) for k, v in p.path.items()},
        identity=identity(trace),
        speed_of_light=speed_of_light(trace),
        notes=list(p.notes),
    )


def step_saving(trace: Trace, kin: pd.DataFrame, delta: np.ndarray) -> tuple[float, float]:
    """Wall time over the analysed steps that the per-kernel savings `delta` give back, and that time's
    share of the GPU time saved (`delta`'s sum).

    The model is the replay (docs/whatif.md): on a copy of the measured graph each kernel of `kin` runs
    its duration less its saving, the graph is replayed and held at the GPU work it keeps, exactly as a
    fix's what-if is, and the saving is the measured window less the replayed one. Faster kernels give
    back wall time only where the host waits on them: a step in which the GPU waits for the host (launch
    overhead, the DataLoader, other CPU work) gains nothing (the idle gaps just grow), one that ends with
    the host blocked in a synchronising call gains up to what it waited. Without a replay graph (no
    analysed step, no kernel of `kin` in it) the GPU saving counts whole. The cost now of fp32-gemm,
    eager-attention and padding-waste (given to them by analyze, in Context.step_saving)."""
    total = float(np.sum(delta))
    if total <= 0.0 or not len(kin):
        return 0.0, 0.0
    base = graph_of(trace)
    node = base.kernel_nodes(kin.index.to_numpy()) if len(base.markers) > 1 else np.zeros(0, dtype=np.int64)
    ok = node >= 0
    if not ok.any():
        return total, 1.0
    dur = kin["dur_us"].to_numpy(float)[ok]
    d = np.asarray(delta, dtype=float)[ok]
    g = base.copy()
    g.g_dur[node[ok]] *= np.clip(1.0 - np.divide(d, dur, out=np.zeros_like(d), where=dur > 0), 0.0, 1.0)
    before = float(identity_steps(trace).sum())
    after = float(replay_steps(g).sum())
    saved = float(np.clip(before - after, 0.0, total))
    return saved, saved / total
