"""Profiler overhead: the host time torch.profiler's own optional settings (record_shapes, with_stack,
profile_memory, with_flops) added to each analysed step, from which settings were on (trace.meta.profiler)
and what they recorded. A fact, not a verdict: detectors decide what it means for their claims."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..trace.model import Trace
from .steps import in_steps_mask


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What one setting adds to the host: `us` per recorded unit (`unit`, read from the table `table`)."""

    setting: str
    unit: str
    table: str  # "cpu_ops" (ops, not annotations), "python" or "memory"
    us: float


# Added host CPU time per recorded unit, measured by bench/profiler_overhead.py (docs/trace-quality.md,
# "Profiler overhead"): torch 2.13.0+cpu on the 2-core development machine, the median over 11 repeats
# of the thread's CPU time with the setting minus the same loop profiled with every option off (with_flops:
# minus record_shapes, which it implies), divided by what the setting recorded. Each setting's cost scales
# with what it records: record_shapes and with_flops work per op, with_stack per Python call (the Python
# tracer hooks every call and return), profile_memory per allocator call. with_stack, record_shapes and
# with_flops from the small-MLP training loop (325 ops, 295 Python calls per step); profile_memory from
# the allocation loop (200 [memory] events per step; the MLP makes too few for its cost to show). A
# faster host pays less: these are this machine's figures, and with_flops costs more on elementwise ops
# (1.17 us per add in the allocation loop).
COSTS = (
    Cost(setting="with_stack", unit="Python function events", table="python", us=0.35),
    Cost(setting="record_shapes", unit="CPU ops", table="cpu_ops", us=0.19),
    Cost(setting="with_flops", unit="CPU ops", table="cpu_ops", us=0.14),
    Cost(setting="profile_memory", unit="[memory] events", table="memory", us=0.06),
)
MEASURED_WITH = "torch 2.13.0+cpu, bench/profiler_overhead.py"


@dataclass(frozen=True, kw_only=True)
class SettingOverhead:
    """One setting that was on: how it is known, what it recorded per step and what that cost."""

    setting: str  # "with_stack"
    source: str  # "metadata", "capture metadata" or "inferred from python_function events"
    unit: str  # "Python function events"
    units_per_step: float  # recorded in the analysed steps, per step
    us_per_unit: float  # COSTS
    us_per_step: float  # units_per_step x us_per_unit


@dataclass(frozen=True, kw_only=True)
class ProfilerOverhead:
    """The host time the profiler's optional settings added, per step and over the analysed steps.
    An upper bound on the GPU idle time it adds: host time on any thread counts, and only host time
    on the launching thread, while the GPU waits for it, turns into idle time."""

    us_per_step: float
    window_us: float  # us_per_step x steps
    steps: int
    settings: tuple[SettingOverhead, ...]  # the settings on, costliest first
    evidence: tuple[str, ...]  # one line per setting on: its source, count, cost
    measured_with: str = MEASURED_WITH

    def covering(self, claimed_us: float, threshold_us: float) -> tuple[str, ...]:
        """The costliest settings whose overhead, taken off a claim of `claimed_us` over the analysed
        steps, leaves it under `threshold_us` (a detector's own firing threshold, same window): the
        settings to capture without. Empty when even all of the estimate leaves the claim above it."""
        left = claimed_us
        out: list[str] = []
        for s in self.settings:
            if left < threshold_us:
                break
            if s.us_per_step <= 0:
                continue
            left -= s.us_per_step * self.steps
            out.append(s.setting)
        return tuple(out) if out and left < threshold_us else ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["settings"] = [asdict(s) for s in self.settings]
        d["evidence"] = list(self.evidence)
        return d


def _units(trace: Trace, table: str) -> int:
    if table == "cpu_ops":
        ops = trace.cpu_ops
        df = ops[~ops["is_annotation"].to_numpy()] if len(ops) else ops
    else:
        df = getattr(trace, table)
    return int(np.count_nonzero(in_steps_mask(trace, df["ts_us"].to_numpy()))) if len(df) else 0


def profiler_overhead(trace: Trace) -> ProfilerOverhead:
    """The estimate for this trace and step selection (computed once). A setting counts when the
    trace's metadata, the capture metadata or its events say it was on (trace.meta.profiler)."""

    def compute() -> ProfilerOverhead:
        n = max(len(trace.steps), 1)
        prof, source = trace.meta.profiler, trace.meta.profiler_source
        rows, evidence = [], []
        on = {c.setting: source.get(c.setting, "metadata") for c in COSTS if prof.get(c.setting) is True}
        if "with_flops" in on and "record_shapes" not in on:
            on["record_shapes"] = "implied by with_flops"  # with_flops records the shapes too (torch 2.13)
        for c in COSTS:
            if c.setting not in on:
                continue
            per = _units(trace, c.table) / n
            row = SettingOverhead(
                setting=c.setting,
                source=on[c.setting],
                unit=c.unit,
                units_per_step=per,
                us_per_unit=c.us,
                us_per_step=per * c.us,
            )
            rows.append(row)
            evidence.append(
                f"{c.setting} on ({row.source}): {per:,.0f} {c.unit} per step x {c.us:g} us = "
                f"{row.us_per_step / 1e3:.3f} ms/step"
            )
        rows.sort(key=lambda r: -r.us_per_step)
        total = sum(r.us_per_step for r in rows)
        return ProfilerOverhead(
            us_per_step=total, window_us=total * n, steps=n, settings=tuple(rows), evidence=tuple(evidence)
        )

    return trace.memo("facts: profiler overhead", compute)
