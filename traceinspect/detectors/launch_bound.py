"""launch-bound: the GPU idles between short kernels while the host is still launching the next one."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..facts import claims
from ..facts.host import LAUNCH_CALLS, launch_rows as _launch_rows  # noqa: F401  (LAUNCH_CALLS: kept importable)
from ..facts.memory_fit import gb
from ..facts.profiler_overhead import profiler_overhead
from ..facts.steps import idle_in_steps
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from ..trace.timeline import is_comm_kernel
from .base import (
    Detector,
    events_from,
    fmt_us,
    in_steps,
    option,
    overhead_evidence,
    overhead_fix,
    pct,
    step_kernels,
    window_label,
    stepped_fused_step,
)

GRAPH_CALLS = {"cudaGraphLaunch", "hipGraphLaunch"}
_TRAINING = re.compile(r"^Optimizer\.step#|^autograd::engine::evaluate_function")
SHORT_KERNEL_US = 10.0


MAX_BATCH_FACTOR = 4096  # the largest factor `launch-bound:batch=N` accepts (a bound on input, not advice)


def batch_variant_factor(variant: str) -> int | None:
    """N of a "batch=N" variant (2 <= N <= MAX_BATCH_FACTOR), else None."""
    base, eq, n = variant.partition("=")
    if base != "batch" or not eq or not n.isdigit() or len(n) > 6:
        return None
    k = int(n)
    return k if 2 <= k <= MAX_BATCH_FACTOR else None


def plan_evidence(plan, window: str) -> list:
    """The batch sweep as evidence: the replayed time per original batch at each factor tried."""
    out = [
        Evidence(
            label="replayed step per original batch at " + ", ".join(f"{k}x" for k, _ in plan.sweep) + " the batch",
            value=", ".join(f"{us / 1e3:.3g}" for _, us in plan.sweep),
            unit="ms",
            window=window,
        )
    ]
    out.append(Evidence(label=f"batch factor recommended ({plan.why})", value=plan.factor, unit="x", window=window))
    return out


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def batch_arithmetic(run_config, factor: int, framework: str) -> str:
    """'per_device_train_batch_size 1 x gradient_accumulation_steps 16 -> 8 x 2 (...)' from run_config,
    keeping the effective batch where gradient accumulation allows it."""
    cfg = run_config.get("config") if isinstance(run_config, dict) else None
    cfg = cfg if isinstance(cfg, dict) else {}
    bs = _int(cfg.get("per_device_train_batch_size"))
    if bs is None and isinstance(run_config, dict) and isinstance(run_config.get("steps"), list):
        first = next((s for s in run_config["steps"] if isinstance(s, dict)), {})
        bs = _int(first.get("batch_size"))
    ga = _int(cfg.get("gradient_accumulation_steps"))
    hf = framework in ("hf_trainer", "trl")
    b_name, a_name = (
        ("per_device_train_batch_size", "gradient_accumulation_steps")
        if hf
        else ("batch size", "accumulated micro-batches")
    )
    if bs is not None and ga is not None and ga >= 2:
        divisors = [d for d in range(2, factor + 1) if ga % d == 0]
        f = max(divisors) if divisors else (ga if ga <= 8 else None)
        if f is not None:
            return (
                f"{b_name} {bs} x {a_name} {ga} -> {bs * f} x {ga // f} (same effective batch of {bs * ga} per device)"
            )
    if bs is not None:
        return (
            f"{b_name} {bs} -> {bs * factor} (the effective batch grows {factor}x: rescale the learning rate, "
            f"or divide {a_name} by {factor} if you accumulate)"
        )
    # the capture recorded neither: no numbers but the replay's factor (the trace shows no accumulation)
    return (
        f"raise the {b_name} about {factor}x, rescaling the learning rate for the larger effective batch or, "
        f"if you accumulate gradients, dividing the {a_name} by {factor} to keep it"
    )


def fit_arithmetic(fit, framework: str) -> str:
    """batch_arithmetic's sentence for a memory-model BatchFit (the batch it sized, nothing else)."""
    hf = framework in ("hf_trainer", "trl")
    b_name, a_name = (
        ("per_device_train_batch_size", "gradient_accumulation_steps")
        if hf
        else ("batch size", "accumulated micro-batches")
    )
    if fit.current_accumulation:
        same = fit.batch * fit.accumulation == fit.current_batch * fit.current_accumulation
        return (
            f"{b_name} {fit.current_batch} x {a_name} {fit.current_accumulation} -> {fit.batch} x "
            f"{fit.accumulation} ("
            + (
                f"same effective batch of {fit.batch * fit.accumulation} per device"
                if same
                else f"effective batch {fit.current_batch * fit.current_accumulation}"
                f" -> {fit.batch * fit.accumulation}: rescale the learning rate"
            )
            + ")"
        )
    return (
        f"{b_name} {fit.current_batch} -> {fit.batch} (the effective batch grows {fit.factor}x: rescale the "
        f"learning rate, or divide {a_name} by {fit.factor} if you accumulate)"
    )


@dataclass(frozen=True)
class LaunchBound(Detector):
    """
    What it detects
        A GPU that idles between short kernels because the host launches them more slowly than the
        GPU runs them: many kernels per step, a median kernel of a few microseconds, and GPU idle
        gaps that end with a kernel the host launched only after the GPU had gone idle (the
        timeline's idle_launch part: host-late gaps up to 100 us).

    Why it costs time
        Each PyTorch op costs 5-20 us of Python, dispatcher and cudaLaunchKernel time on the host.
        With a small batch a kernel finishes in 2-10 us, so the GPU waits for the host after each
        one and the step takes as long as the host needs to issue it. A larger batch does more work
        per launch for the same host cost; CUDA graphs replay a whole captured sequence with one
        launch.

    How time lost is estimated
        The idle_launch time of the analysed steps, minus the part inside unfused optimizer steps
        (claimed by unfused-optimizer) and under steady-state cudaMalloc/cudaFree calls (claimed by
        allocator-churn). Longer host-late gaps (idle_cpu, over 100 us) are reported but not
        counted: they are Python or CPU work between launches, not launch overhead, and a larger
        batch does not shorten them. Upper bound: a larger batch or CUDA graphs remove most launch
        gaps, but the GPU then runs longer kernels and the host keeps some launch work, so the step
        shrinks by less than the idle time when the GPU becomes the bottleneck.

    How to fix
        The factor is sized by the replay (whatif/batch.py, docs/whatif.md "Batch size"): the
        larger-batch transformation below is replayed at 2x, 4x, 8x, ... and the fix names the smallest
        factor past which doubling cuts the time per sample by less than 5%, capped by the memory model
        when the trace has memory figures ([memory] events or the capture helpers' peaks): the largest
        micro-batch whose predicted peak stays under 90% of device memory, with the matching
        accumulation (docs/memory.md). The sweep is in the evidence. When not even 2x fits, or doubling
        gains under 5%, the fix is CUDA graphs alone. Without memory figures the size is not checked
        against device memory, and the fix says so. `whatif --fix launch-bound:batch=N` replays any factor.
        The batch and accumulation in the fix are the capture's (run_config); without them it names only
        the factor. The optimizer it asks to fuse is the one the trace shows stepped
        (`Optimizer.step#<Class>.step`), none when that one is already fused, and generic wording when
        no step is recorded.

        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`), same effective batch (an example: a
        batch of 1 with 16 accumulation steps grown 8x):

            # before
            args = TrainingArguments(..., per_device_train_batch_size=1, gradient_accumulation_steps=16)
            # after
            args = TrainingArguments(..., per_device_train_batch_size=8, gradient_accumulation_steps=2,
                                     optim="adamw_torch_fused", torch_compile=True,
                                     torch_compile_mode="reduce-overhead")

        Plain PyTorch:

            # before
            loader = DataLoader(ds, batch_size=1)
            # after: 8x the batch, 8x fewer accumulated micro-batches, and fewer launches
            loader = DataLoader(ds, batch_size=8)
            model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs
            opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)  # your optimizer, fused

    False positives
        Many short kernels alone are not a problem: a busy GPU (healthy traces run 40% of kernels
        under 10 us at 99% busy) keeps its queue full, and this detector only fires when the GPU
        actually idles waiting for launches. Latency-bound inference at batch 1 may be launch-bound by
        design; there CUDA graphs are the fix. The profiler's per-op cost (record_shapes, with_flops,
        with_stack's Python calls) is host time between launches, so it widens every launch gap: the
        evidence carries that estimate (docs/trace-quality.md, "Profiler overhead"), and when it alone
        could lift the claim over min_idle_frac the confidence is low and the fix asks for a
        re-capture without the costliest settings.

    References
        HTA kernel launch statistics and idle-time breakdown (host wait); TensorBoard profiler plugin
        GPU utilization rule (< 50%); PyTorch CUDA graphs docs.
    """

    code = "TI101"
    fires_on = ("builders.build_launch_bound", "builders_host.build_launch_bound_hf")
    silent_on = (
        "builders.build_healthy",
        "builders_host.build_busy_short_kernels",
        "builders_host.build_unfused_optimizer",
    )

    claims_parts = ("idle_launch",)
    reserves = ("idle_launch",)  # its launch gaps, when it reports them (else host-bound's)
    min_idle_frac: float = option(0.10, "minimum share of the analysed steps the GPU idles in launch gaps")
    max_busy_frac: float = option(0.85, "GPU busy share above which the GPU is not launch-bound")

    graph_kernel_us: float = option(1.0, "what-if: host cost per kernel when a CUDA graph replays the launches")
    kernel_fixed_us: float = option(
        2.0,
        "what-if (larger batch): the part of a kernel's duration that does not grow "
        "with the batch (grid dispatch, completion), at most half the kernel",
    )

    variants = ("cuda-graphs", "batch")

    @staticmethod
    def batch_factor(ctx):
        """The batch growth the fix recommends and its memory fit (or None): the run's batch plan
        (whatif/batch.py: the smallest factor past which the replayed time per sample improves by less
        than 5%, capped by the memory model), the one number the fix, the what-if and the memory
        section show. Without a plan (a context built outside analyze) no growth is recommended."""
        plan = ctx.batch_plan() if ctx.batch_plan is not None else None
        return (plan.factor, plan.fit, plan) if plan is not None else (1, None, None)

    @staticmethod
    def recommended_variant(finding) -> str:
        """The what-if variant the finding's own fix text leads with: a larger batch, unless the memory
        model says the batch cannot grow (then CUDA graphs alone; the fix may open with a re-capture)."""
        fix = str(finding.fix).lower() if finding is not None else ""
        if finding is None or "the batch cannot grow" in fix or fix.startswith("no larger batch"):
            return "cuda-graphs"
        return "batch"

    def whatif(self, graph, finding, variant: str = "cuda-graphs") -> str:
        """Replay model, two variants (`--fix launch-bound:cuda-graphs` / `launch-bound:batch`; a plain
        `launch-bound` is CUDA graphs in `whatif`, the variant the fix text leads with in the verdict).

        CUDA graphs: the launch gaps this finding claims go (declined, the gaps detect() measured; none:
        nothing changes), and each kernel launch in the steps costs `graph_kernel_us` of host time (a
        graph replays its kernels from one launch).

        Larger batch, per equivalent original batch: with the batch k times larger (k the factor the fix
        recommends, or N of `launch-bound:batch=N`), a step launches the same kernels behind the same
        host work, and each kernel of measured duration d lasts f + (d - f) x k: f = min(`kernel_fixed_us`,
        d / 2) is the part that does not grow (grid dispatch, completion: 1-3 us even for a kernel with
        almost no work, the shortest kernels of CUPTI/roctracer traces; at most half a kernel, so that
        no kernel is all fixed cost and no trace of short kernels gains without bound), the rest is work
        that grows with the batch. A kernel whose grid underfills the GPU (fewer blocks than SMs) may run
        a larger batch in less than k times its work; the model does not take that gain (errs slow),
        since a grid need not grow with the batch (single-block reductions, scalar ops) and the trace
        cannot tell which do. Per original batch that is the measured step graph with every host time
        in the steps (gaps, call costs, wait residuals) and every launch latency and slack divided by k
        and each kernel lasting f / k + (d - f) (the replay is max-plus, so dividing every duration of
        the k-batch step by k divides its step time by k). Copies and communication kernels are kept
        whole (their bytes grow with the batch, or they wait on other ranks), as are optimizer kernels'
        time above the fixed part (once per step, so this errs slow). The host work between launches is
        taken as per launch (dispatch), so per-sample host work (data loading, collation) is wrongly
        divided by k too."""
        if variant.startswith("batch"):  # "batch=N" (engine.predict sizes a plain "batch" by the run's plan)
            return self._whatif_batch(graph, finding, batch_variant_factor(variant) or 1)
        if finding is not None:
            us = graph.remove_claimed_host_time(finding, "idle_launch")
        else:  # declined (GPU busy, or below the threshold): the launch gaps detect() measured
            gaps = self.claim(graph.trace)[0]
            if not iv.total(gaps):
                return "CUDA graphs: no launch gaps in the steps, nothing to change"
            us = graph.remove_host_time(*gaps)
        lh = graph.launches_in_steps()
        graph.h_own[lh] = np.minimum(graph.h_own[lh], self.graph_kernel_us)
        return (
            f"CUDA graphs: {us / 1e3:.1f} ms of launch gaps go, {len(lh)} launches cost "
            f"{self.graph_kernel_us:g} us each"
        )

    def _whatif_batch(self, graph, finding, k: int) -> str:
        if finding is None:
            return "larger batch: launch-bound did not fire, nothing to change"
        if k < 2:
            return "larger batch: no batch growth (the memory model or the replay leaves none), nothing to change"
        n = self.scale_batch(graph, k)
        return (
            f"larger batch ({k}x, per original batch): {n} kernels keep their time less f x (1 - 1/{k}), "
            f"f = min({self.kernel_fixed_us:g} us, half the kernel); host time and launch latency in the steps / {k}"
        )

    def scale_batch(self, graph, k: float) -> int:
        """The larger-batch transformation at factor k (see whatif); returns the kernels it rescaled."""
        gs = graph.gpu_in_steps()
        ker = gs & (graph.g_kind == "kernel") & ~np.asarray(is_comm_kernel(graph.g_name.astype(str)), dtype=bool)
        d = graph.g_dur
        fixed = np.minimum(d / 2.0, self.kernel_fixed_us)
        graph.g_dur = np.where(ker, fixed / k + (d - fixed), d)
        graph.g_slack = np.where(gs, graph.g_slack / k, graph.g_slack)
        graph.g_lat = np.where(gs, graph.g_lat / k, graph.g_lat)
        graph.scale_host(graph.host_in_steps(), 1.0 / k)
        graph.time_scale /= k  # per original batch: the GPU's lag behind the host shrinks with the step
        return int(ker.sum())

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        if not len(trace.runtime):
            yield self.skip("no CUDA/HIP runtime events: host-late launch gaps cannot be identified")
            return
        win = ctx.window_us
        if not win:
            return
        claimed, raw, busy, reports = self.claim(trace)
        lost = iv.total(claimed)
        frac = lost / win
        if not reports:
            if lost > 0:
                why = (
                    f"GPU busy {100 * busy:.0f}% (over {100 * self.max_busy_frac:g}%)"
                    if busy > self.max_busy_frac
                    else f"below the {100 * self.min_idle_frac:g}% threshold"
                )
                yield self.declined(
                    f"launch gaps present, {fmt_us(lost / max(ctx.n_steps, 1))}/step ({100 * frac:.1f}%), {why}"
                )
            return
        n = ctx.n_steps
        k = step_kernels(trace)
        dur = k["dur_us"].to_numpy()
        med = float(np.median(dur)) if dur.size else 0.0
        short = float(np.mean(dur < SHORT_KERNEL_US)) if dur.size else 0.0
        rt = in_steps(trace.runtime, trace)
        launches = _launch_rows(rt)
        graphs = int(launches["name"].astype(object).isin(GRAPH_CALLS).sum())
        idle_cpu = iv.total(idle_in_steps(trace, "idle_cpu"))
        w = window_label(trace)
        ev = [
            Evidence(
                label="GPU idle waiting for kernel launches", value=round(lost / n / 1e3, 3), unit="ms/step", window=w
            ),
            Evidence(label="share of step time", value=round(100 * frac, 1), unit="%", window=w),
            Evidence(label="GPU busy (kernels, copies)", value=round(100 * busy, 1), unit="%", window=w),
            Evidence(label="kernels per step", value=round(len(k) / n), unit="kernels", window=w),
            Evidence(label="median kernel duration", value=round(med, 2), unit="us", window=w),
            Evidence(label=f"kernels under {SHORT_KERNEL_US:g} us", value=round(100 * short, 1), unit="%", window=w),
            Evidence(
                label="launch API time per step",
                value=round(float(launches["dur_us"].sum()) / n / 1e3, 3),
                unit="ms/step",
                window=w,
            ),
            Evidence(
                label="median launch call",
                value=round(float(launches["dur_us"].median()), 2) if len(launches) else 0,
                unit="us",
                window=w,
            ),
        ]
        if raw - lost > 1e-6:
            ev.append(
                Evidence(
                    label="launch gaps left to unfused-optimizer / allocator-churn",
                    value=round((raw - lost) / n / 1e3, 3),
                    unit="ms/step",
                    window=w,
                )
            )
        if idle_cpu > 0:
            ev.append(
                Evidence(
                    label="longer host gaps (idle_cpu, over 100 us; not counted)",
                    value=round(idle_cpu / n / 1e3, 3),
                    unit="ms/step",
                    window=w,
                )
            )
        if graphs:
            ev.append(Evidence(label="CUDA graph launches", value=round(graphs / n, 1), unit="per step", window=w))
        title = (
            f"Launch-bound: the GPU idles {fmt_us(lost / n)} per step ({pct(frac)}) between "
            f"{len(k) / n:.0f} short kernels per step (median {med:.1f} us)"
        )
        factor, fit, plan = self.batch_factor(ctx)
        if plan is not None:
            ev += plan_evidence(plan, w)
        if fit is not None:
            ev.append(
                Evidence(
                    label="batch growth that fits under "
                    f"{fit.margin_frac:.0%} of {gb(fit.capacity_bytes)} (memory model)",
                    value=round(fit.max_factor, 1),
                    unit="x",
                )
            )
        ops = trace.cpu_ops
        training = ctx.framework in ("hf_trainer", "trl", "lightning") or (
            bool(len(ops)) and bool(name_flags(ops["name"], _TRAINING.search).any())
        )
        conf = "high" if frac >= 0.25 and short >= 0.5 else "medium"
        fix = self._fix(trace, ctx, factor, training, graphs > 0, fit)
        # the profiler's per-op cost is host time between launches: it widens every launch gap, so a claim
        # that the estimate alone could lift over min_idle_frac may be the profiler's
        ov = profiler_overhead(trace)
        ev += overhead_evidence(ov, w)
        recapture = ov.covering(lost, self.min_idle_frac * win)
        if recapture:
            conf = "low"
            fix = overhead_fix(ov, recapture, self.min_idle_frac, fix)
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence=conf,
            evidence=ev,
            fix=fix,
            events=self._events(trace, k, claimed),
            upper_bound=True,
            idle_claims={"idle_launch": claimed},
        )

    def claim(self, trace) -> tuple[iv.Set, float, float, bool]:
        """The launch gaps this detector claims (idle_launch in the steps, less the unfused-optimizer and
        allocator-churn parts), the raw idle_launch, the GPU busy share, and whether it reports them."""
        tl = trace.timeline
        per = tl.per_step
        win = float(per["dur_us"].sum())
        busy = float((per["compute_us"] + per["comm_us"] + per["memcpy_us"]).sum()) / win if win else 0.0
        idle = idle_in_steps(trace, "idle_launch")
        claimed = claims.unclaimed(trace, self.name, "idle_launch", idle)
        frac = iv.total(claimed) / win if win else 0.0
        return claimed, iv.total(idle), busy, frac >= self.min_idle_frac and busy <= self.max_busy_frac

    def reserved(self, trace) -> iv.Set:
        claimed, _, _, reports = self.claim(trace)
        return claimed if reports else iv.EMPTY

    @staticmethod
    def _fix(trace, ctx, factor: int, training: bool, has_graphs: bool, fit=None) -> str:
        # the optimizer the trace shows stepped (none when it is already fused; generic when none is recorded)
        fused = stepped_fused_step(trace, ctx.framework) if training else None
        opt = f" and use {fused}" if fused else ""
        graphs = (
            "capture more of the step in CUDA graphs"
            if has_graphs
            else 'capture the step with CUDA graphs (torch.compile(model, mode="reduce-overhead"))'
        )
        mem = (
            " (not checked against device memory: the trace has no memory figures; capture with "
            "profile_memory=True to size it)"
        )
        if fit is not None:
            mem = (
                f" (memory: predicted peak {gb(fit.predicted_peak_bytes)} of {gb(fit.capacity_bytes)}, under the "
                f"{fit.margin_frac:.0%} margin; {gb(fit.fixed_bytes)} fixed + {gb(fit.per_batch_bytes)} of "
                "activations per current batch; see the report's memory section)"
            )
            if factor < 2:
                return (
                    f"The batch cannot grow: memory already peaks at {gb(fit.fixed_bytes + fit.per_batch_bytes)} of "
                    f"{gb(fit.capacity_bytes)} (over the {fit.margin_frac:.0%} margin at 2x); instead {graphs}"
                    + opt
                    + "."
                )
        if factor < 2:
            return (
                f"No larger batch: doubling it gains under 5% per sample in the replay (see the evidence); "
                f"instead {graphs}{opt}."
            )
        if not training:
            return (
                f"Batch more samples per forward (about {factor}x){mem} and {graphs}: each launch then carries "
                "more GPU work."
            )
        arith = (
            fit_arithmetic(fit, ctx.framework)
            if fit is not None and fit.current_batch
            else batch_arithmetic(trace.meta.run_config, factor, ctx.framework)
        )
        return f"Give each launch more work: {arith}{mem}; then {graphs}{opt}."

    @staticmethod
    def _events(trace, k, claimed):
        """The kernels that end the longest launch gaps. An NCCL/RCCL kernel is never one: it starts
        when launched and then waits for its peers, so the gap before it is not launch overhead."""
        if not len(k) or claimed[0].size == 0:
            return ()
        order = np.argsort(claimed[1] - claimed[0])[::-1]
        ts = k["ts_us"].to_numpy()
        comm = is_comm_kernel(k["name"])
        idx: list[int] = []
        for i in np.minimum(np.searchsorted(ts, claimed[1][order] - 1e-6), len(k) - 1):
            if not comm[i] and int(i) not in idx:
                idx.append(int(i))
                if len(idx) == 3:
                    break
        return events_from(k.iloc[sorted(idx)], trace, "kernel") if idx else ()
