"""unfused-optimizer: an optimizer step made of many tiny per-parameter or multi-tensor kernels."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..facts.optimizer import OPT_PREFIX, optimizer_steps  # noqa: F401  (kept importable here)
from ..facts.run import num_parameters
from ..facts.steps import idle_in_steps
from ..findings import EventRef, Evidence
from ..trace import intervals as iv
from .base import Detector, fmt_us, option, pct, window_label, fused_step

DEFAULT_MIN_KERNELS = 50
# bytes a single fused pass touches per parameter (fp32 states): Adam-like reads p, g, m, v and writes
# p, m, v (7 x 4 B); SGD with momentum / Adagrad / RMSprop read p, g, state and write p, state (5 x 4 B)
_BYTES_PER_PARAM = ((re.compile(r"SGD|Adagrad|RMSprop", re.IGNORECASE), 20.0),)
_ADAM_BYTES_PER_PARAM = 28.0
BANDWIDTH_EFFICIENCY = 0.8  # a fused multi-tensor kernel reaches ~80% of peak memory bandwidth


def unfused_windows(trace, min_kernels: int = DEFAULT_MIN_KERNELS) -> iv.Set:
    """Time from the start of each unfused optimizer step to its last kernel's end: the span this
    detector owns (launch-bound leaves its idle time alone, so nothing is counted twice)."""
    if not trace.has_gpu:
        return iv.EMPTY
    o = optimizer_steps(trace)
    o = o[o["impl"].isin(["foreach", "for-loop"]) & (o["n_kernels"] >= min_kernels)]
    if not len(o):
        return iv.EMPTY
    return iv.union(o["ts_us"], o["window_end_us"])


def _bytes_per_param(opt_class: str) -> float:
    for rx, b in _BYTES_PER_PARAM:
        if rx.search(opt_class):
            return b
    return _ADAM_BYTES_PER_PARAM


@dataclass(frozen=True)
class UnfusedOptimizer(Detector):
    """
    What it detects
        An optimizer step (`Optimizer.step#<Class>.step` span) that launches many small kernels:
        the for-loop implementation (`foreach=False`: several `aten::mul_` / `aten::add_` /
        `aten::addcdiv_` launches per parameter) or the multi-tensor `aten::_foreach_*`
        implementation (one launch per op per chunk of tensors), instead of a fused kernel
        (`aten::_fused_adamw_` / `FusedAdamMathFunctor`, apex or DeepSpeed `AdamFunctor`).

    Why it costs time
        Each per-parameter kernel does a few microseconds of GPU work behind 5-20 us of Python,
        dispatcher and launch overhead, so the GPU idles between them; every elementwise op also
        re-reads and re-writes the parameter and its states from memory. A fused optimizer reads
        each parameter, gradient and state once, in a handful of launches.

    How time lost is estimated
        Inside each unfused optimizer step, from its start to the end of its last kernel: the GPU
        idle time the timeline attributes to launch gaps (idle_launch), plus, when the parameter
        count is known (run_config num_parameters), the optimizer kernel time above a fused step's
        time (parameters x bytes per parameter, 28 B for Adam-like and 20 B for SGD/Adagrad/RMSprop
        fp32 states, at 80% of the GPU's peak memory bandwidth). Without the parameter count only the
        idle part is counted. Launch-bound does not claim the idle time inside these windows, so the
        two findings never overlap. Point estimate: a fused step still costs its own kernels and a
        few launches, which the estimate keeps.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before
            args = TrainingArguments(..., optim="adamw_torch")
            # after (PyTorch >= 2.0)
            args = TrainingArguments(..., optim="adamw_torch_fused")

        Plain PyTorch:

            # before
            opt = torch.optim.AdamW(model.parameters(), lr=2e-5, foreach=False)
            # after
            opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
            # other optimizers: fused=True where your PyTorch version offers it, else foreach=True

    False positives
        Very small models whose whole step is short may show a large optimizer share that no
        fused kernel can remove (the fused estimate keeps the kernel time when the parameter count
        is unknown). CPU optimizers (DeepSpeedCPUAdam, ZeRO-Offload) are left to cpu-offload.
        Optimizers without a fused variant (Shampoo, custom) still benefit from foreach or
        torch.compile of the step.

    References
        PyTorch optimizer docs (foreach / fused); pytorch/pytorch#95241 (foreach, not fused, is the
        default); transformers#22144 (optim="adamw_torch_fused").
    """

    code = "TI202"
    fires_on = ("builders_host.build_unfused_optimizer", "builders_host.build_unfused_optimizer_hf")
    silent_on = ("builders.build_healthy", "builders_host.build_fused_optimizer")

    claims_parts = ("idle_launch",)
    reserves = ("idle_launch",)  # the GPU idle inside an unfused optimizer step
    min_kernels: int = option(DEFAULT_MIN_KERNELS, "minimum kernels launched by one optimizer step")
    min_frac: float = option(0.02, "minimum share of the analysed steps the optimizer step wastes")
    fused_kernels: int = option(4, "what-if: kernels of one fused/foreach optimizer step (multi-tensor launches)")
    kernel_fixed_us: float = option(2.0, "what-if: fixed GPU cost of one kernel (launch, one wave, completion)")

    def whatif(self, graph, finding) -> str:
        """Replay model: in each unfused optimizer step the finding counts, the kernels launched from its
        thread become `fused_kernels` kernels (torch's fused/foreach AdamW issues one multi-tensor kernel
        per tensor-list chunk: a handful per step) that keep the memory-bound work, the sum of the
        measured durations less `kernel_fixed_us` per kernel, plus that fixed cost once per fused
        kernel, split evenly over the first `fused_kernels` of them; the other kernels no longer run and
        their launches leave the host (each launch call and the per-parameter Python before it).
        Sources: PyTorch's multi_tensor_apply (foreach and fused optimizers) packs up to a few dozen
        tensors and a bounded number of blocks into each launch, so a model in one dtype takes a handful
        of launches (large models take tens: the kept time is the same, only that many launches' host
        time is not counted); the per-kernel fixed cost is launch-bound's `kernel_fixed_us` (2 us: grid
        dispatch, one wave's latency and completion)."""
        opt = optimizer_steps(graph.trace)  # the steps detect() judges, reported or declined
        bad = opt[opt["impl"].isin(["foreach", "for-loop"]) & (opt["n_kernels"] >= self.min_kernels)]
        lh = np.maximum(graph.g_launch, 0)
        launched = (graph.g_launch >= 0) & (graph.g_kind == "kernel")
        l_ts, l_tid = graph.h_ts[lh], graph.h_tid[lh]
        drop = np.zeros(len(graph.g_ts), dtype=bool)
        keep_all, n_before, n_after = [], 0, 0
        for r in bad.itertuples(index=False):
            nodes = np.flatnonzero(launched & (l_ts >= r.ts_us) & (l_ts <= r.end_us) & (l_tid == r.tid))
            if not len(nodes):
                continue
            nodes = nodes[np.argsort(graph.g_ts[nodes], kind="stable")]
            m = min(self.fused_kernels, len(nodes))
            fixed = np.minimum(graph.g_dur[nodes], self.kernel_fixed_us)
            work = float((graph.g_dur[nodes] - fixed).sum()) + m * self.kernel_fixed_us
            keep, gone = nodes[:m], nodes[m:]
            graph.g_dur[keep] = work / m
            drop[gone] = True
            keep_all.append(keep)
            n_before += len(nodes)
            n_after += m
        if not n_before:
            return "no unfused optimizer kernels in the replayed device: nothing to change"
        keep = np.concatenate(keep_all)
        graph.drop_ops(drop, keep_launches=graph.g_launch[keep][graph.g_launch[keep] >= 0])
        return (
            f"{len(keep_all)} optimizer step(s): {n_before} kernels become {n_after} "
            f"({self.fused_kernels} per step, the work above {self.kernel_fixed_us:g} us per kernel kept); "
            f"{n_before - n_after} launches go"
        )

    def reserved(self, trace) -> iv.Set:
        return unfused_windows(trace, self.min_kernels)

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        opt = optimizer_steps(trace)
        if not len(opt):
            yield self.skip("no Optimizer.step# spans in the analysed steps (inference, or a custom optimizer loop)")
            return
        if (opt["impl"] == "cpu").all():
            yield self.skip("the optimizer runs on the CPU (see cpu-offload)")
            return
        bad = opt[opt["impl"].isin(["foreach", "for-loop"]) & (opt["n_kernels"] >= self.min_kernels)]
        if not len(bad):
            return
        win = unfused_windows(trace, self.min_kernels)
        launch_claim = iv.intersect(idle_in_steps(trace, "idle_launch"), win)
        idle_launch = iv.total(launch_claim)
        idle_cpu = iv.total(iv.intersect(idle_in_steps(trace, "idle_cpu"), win))
        n_spans = len(bad)
        busy = float(bad["busy_us"].sum())
        nparams = num_parameters(trace)
        dev = trace.device
        mem_gbps = dev.peaks.mem_gbps if dev is not None and dev.peaks is not None else None
        cls = str(bad["opt_class"].mode().iloc[0])
        fused_us = None
        if nparams and mem_gbps:
            # bytes / (GB/s * 1e3) = microseconds
            fused_us = nparams * _bytes_per_param(cls) / (mem_gbps * BANDWIDTH_EFFICIENCY * 1e3)
        saving = max(0.0, busy - fused_us * n_spans) if fused_us is not None else 0.0
        lost = idle_launch + saving
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"unfused optimizer steps present ({len(bad)}), wasting {100 * frac:.1f}% of the "
                f"window, below the {100 * self.min_frac:g}% threshold"
            )
            return
        impl = str(bad["impl"].mode().iloc[0])
        k_per = float(bad["n_kernels"].mean())
        wall = float((bad["end_us"] - bad["ts_us"]).mean())
        med = float(np.median(bad["median_kernel_us"]))
        w = window_label(trace)
        ev = [
            Evidence(label="optimizer", value=f"{cls} ({impl} implementation)", unit=""),
            Evidence(label="kernels per optimizer step", value=round(k_per), unit="kernels", window=w),
            Evidence(label="median optimizer kernel", value=round(med, 2), unit="us", window=w),
            Evidence(
                label="optimizer kernel time per step",
                value=round(float(bad["kernel_us"].mean()) / 1e3, 3),
                unit="ms",
                window=w,
            ),
            Evidence(
                label="optimizer.step wall time per step (host span)", value=round(wall / 1e3, 3), unit="ms", window=w
            ),
            Evidence(
                label="GPU idle between optimizer kernels (launch gaps)",
                value=round(idle_launch / n_spans / 1e3, 3),
                unit="ms/step",
                window=w,
            ),
            Evidence(label="share of step time lost", value=round(100 * frac, 1), unit="%", window=w),
        ]
        if idle_cpu > 0:
            ev.append(
                Evidence(
                    label="other host gaps inside the optimizer (idle_cpu, not counted)",
                    value=round(idle_cpu / n_spans / 1e3, 3),
                    unit="ms/step",
                    window=w,
                )
            )
        if fused_us is not None:
            ev.append(
                Evidence(
                    label=f"fused step estimate ({nparams:,} parameters at {BANDWIDTH_EFFICIENCY:.0%} of "
                    f"{mem_gbps:g} GB/s)",
                    value=round(fused_us / 1e3, 3),
                    unit="ms",
                    window=w,
                )
            )
        else:
            ev.append(Evidence(label="kernel-time saving", value="not estimated (parameter count unknown)", unit=""))
        title = (
            f"Unfused {cls} step: {k_per:.0f} kernels per optimizer step (median {med:.1f} us) "
            f"waste {fmt_us(lost / n_spans)} per step ({pct(frac)})"
        )
        events = tuple(
            EventRef(
                name=str(r.name),
                ts_us=round(float(r.ts_us), 3),
                dur_us=round(float(r.end_us - r.ts_us), 3),
                track=f"CPU thread {int(r.tid)}",
            )
            for r in bad.nlargest(3, "n_kernels").itertuples(index=False)
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="high" if frac >= 0.05 and impl == "for-loop" else "medium",
            evidence=ev,
            fix=self._fix(ctx, cls, impl, trace),
            events=events,
            idle_claims={"idle_launch": launch_claim},
        )

    @staticmethod
    def _fix(ctx, cls: str, impl: str = "for-loop", trace=None) -> str:
        """The fused step of the optimizer the trace shows stepped (facts/optimizer.py), in its words."""
        how = fused_step(cls, impl, ctx.framework, trace)
        if how is None:  # not reached: a fused or CPU step is not reported
            return "Use a fused optimizer step."
        if ctx.framework in ("hf_trainer", "trl") and "optim=" in how:
            return f"Use {how} in TrainingArguments / SFTConfig."
        return f"Use {how}" + ("." if "torch.compile" in how else ", or torch.compile the optimizer step.")
