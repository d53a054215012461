"""host-bound: the GPU idles while the thread that launches its work is busy with something else."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts import claims
from ..facts.device import primary_kernels
from ..facts.host import launch_rows
from ..facts.profiler_overhead import profiler_overhead
from ..facts.steps import idle_in_steps
from ..findings import EventRef, Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from .base import (
    Detector,
    fmt_us,
    option,
    overhead_evidence,
    overhead_fix,
    pct,
    window_label,
    preprocess_culprit,
    preprocessing_kinds,
)

# Python frames that belong to PyTorch itself: skipped when naming the user's code
_LIBRARY_FRAME = re.compile(
    r"^(torch/|<built-in|<string>|nn\.Module:|threading\.py|multiprocessing/|runpy\.py|"
    r"contextlib\.py|functools\.py|site-packages/torch/|typing\.py|abc\.py)"
)
# aten ops that only touch tensor metadata or allocate: never CPU math
_METADATA_OP = re.compile(
    r"aten::(_?unsafe_view|view|view_as|as_strided|slice|select|narrow|transpose|t|permute|"
    r"reshape|_reshape_alias|unsqueeze|squeeze|expand|expand_as|alias|detach|lift_fresh|split|"
    r"chunk|unbind|split_with_sizes|empty|empty_like|empty_strided|new_empty|new_empty_strided|"
    r"resize_|set_|flatten|unflatten|resolve_conj|resolve_neg|result_type|size|stride|numel|"
    r"dim|is_same_size)$"
)
_STEP = re.compile(r"^(ProfilerStep#|## |enumerate\(DataLoader\)#|enumerate\(DataPipe\)#)")

# Recognisable culprits, most specific first: (key, what it is, fix, pattern over op / annotation / Python names).
CULPRITS = (
    (
        "recompile",
        "torch.compile compiling or recompiling inside the step (recompilations, graph breaks)",
        'find them with TORCH_LOGS="recompiles,graph_breaks"; mark the varying dimensions dynamic '
        "(torch._dynamo.mark_dynamic) or pad shapes to a few sizes, and remove the graph breaks it reports",
        # compile-time code only: the runtime of compiled code (eval_frame, guards, inductor's output_code and
        # runtime/) runs every step and belongs to "compiled" below
        re.compile(
            r"torch/_dynamo/(convert_frame|output_graph|symbolic_convert|variables/)|"
            r"torch/_inductor/(compile_fx|graph|codecache|scheduler|lowering|codegen/)|"
            r"compile_inner|CompileId|dynamo_timed|InductorCompile|OutputGraph",
            re.IGNORECASE,
        ),
    ),
    (
        "gc",
        "garbage-collector pauses on the training thread",
        "call gc.freeze() after building the model and data, and gc.disable() in the loop with gc.collect() every "
        "few hundred steps",
        re.compile(r"^gc\.py|<built-in method collect|\bgc\.collect\b|garbage.collect", re.IGNORECASE),
    ),
    (
        "logging",
        "logging and metrics in the loop",
        "log every N steps, keep running metrics on the GPU and let the logger (wandb, TensorBoard) flush in "
        "the background",
        re.compile(
            r"wandb/|tensorboard|SummaryWriter|mlflow|comet_ml|logging/__init__\.py|_maybe_log_save_evaluate|"
            r"compute_metrics|<built-in (function|method) print>|log_metrics|on_log\b|tqdm/",
            re.IGNORECASE,
        ),
    ),
    (
        "preprocess",
        *preprocess_culprit("tokenization, decoding or augmentation"),
        re.compile(
            r"tokeniz|torchvision/transforms|albumentations|PIL/|image_processing|feature_extraction|"
            r"processing_utils|augment",
            re.IGNORECASE,
        ),
    ),
    (
        "pipeline",
        "pre/post-processing of an inference loop between forwards (not a training loop)",
        "batch more requests per forward, overlap pre/post-processing with the GPU (another thread or process, an "
        "overlapping scheduler) and capture the forward in CUDA graphs",
        re.compile(
            r"transformers/pipelines/|pipeline\.__call__|Pipeline\.|\bpreprocess\b|\bpostprocess\b|"
            r"scheduler|detokeniz|sampling|sampler|prepare_inputs|_prepare_model_input|process_batch_result|"
            r"update_states|engine/core",
            re.IGNORECASE,
        ),
    ),
    (
        "compiled",
        "Python overhead around torch.compile regions (guards, graph breaks splitting the graph)",
        'use torch.compile(model, mode="reduce-overhead") (CUDA graphs) and remove graph breaks '
        '(TORCH_LOGS="graph_breaks") so one region covers the step',
        re.compile(
            r"Torch-Compiled Region|CompiledFunction|Compiled Function|TorchDynamo Cache Lookup|"
            r"torch/_dynamo/(eval_frame|guards)\.py|torch/_inductor/(output_code\.py|runtime/)|"
            r"_aot_autograd/runtime_wrappers\.py",
            re.IGNORECASE,
        ),
    ),
)
PIPELINE_PREPROCESS_FIX = (
    "the pipeline decodes and transforms its inputs on the calling thread: pass it a "
    "dataset or generator with batch_size and num_workers (for example pipe(dataset, batch_size=8, "
    "num_workers=4)) so DataLoader workers preprocess while the GPU runs"
)
CPU_TENSOR = (
    "cpu-tensor",
    "CPU-side tensor work (aten ops that launch no GPU kernel)",
    "create these tensors on the GPU (device=...) or move the work into the DataLoader workers; avoid "
    ".cpu() / .numpy() round trips in the step",
)
OVERHEAD = (
    "overhead",
    "Python and framework overhead per op (many aten:: dispatches, little GPU work each)",
    'capture the step with CUDA graphs (torch.compile(model, mode="reduce-overhead")), fuse small ops, and '
    "give each op more work (a larger batch)",
)


SHORT = {
    "recompile": "torch.compile recompiling",
    "gc": "garbage collection",
    "logging": "logging and metrics",
    "preprocess": "input preprocessing",
    "pipeline": "inference pre/post-processing",
    "compiled": "Python overhead around compiled regions",
    "cpu-tensor": "CPU-side tensor work",
    "overhead": "Python and framework overhead per op",
}


def launching_thread(trace) -> int | None:
    """The host thread whose runtime calls launched most of the analysed device's kernels."""
    k = primary_kernels(trace)
    rt = trace.runtime
    li = k["launch_idx"].to_numpy() if "launch_idx" in k.columns else np.empty(0, dtype=np.int64)
    li = li[li >= 0]
    if not len(rt):
        return None
    if li.size:
        tids = rt["tid"].to_numpy()[li]
    else:  # kernels not linked to their launches (older ROCm traces): the thread that launches the most
        tids = launch_rows(rt)["tid"].to_numpy()
        if not tids.size:
            return None
    vals, counts = np.unique(tids, return_counts=True)
    return int(vals[np.argmax(counts)])


def _measure_upto(s: np.ndarray, e: np.ndarray):
    """t -> measure of the interval set [s, e) below t (vectorised)."""
    pre = np.concatenate(([0.0], np.cumsum(e - s)))

    def f(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right") - 1
        ic = np.maximum(i, 0)
        inside = np.clip(t - s[ic], 0.0, (e - s)[ic])
        return np.where(i >= 0, pre[ic] + inside, 0.0)

    return f


def self_overlap(spans: pd.DataFrame, claimed: iv.Set) -> tuple[pd.DataFrame, np.ndarray]:
    """For nested spans of one thread, the part of `claimed` each covers as the innermost span.

    Returns the spans that overlap `claimed` at all (sorted by start) and their innermost overlap (us).
    Spans are assumed to nest (a child starts and ends inside its parent, 10 ns slack)."""
    if not len(spans) or claimed[0].size == 0:
        return spans.iloc[0:0], np.zeros(0)
    f = _measure_upto(claimed[0], claimed[1])
    ts = spans["ts_us"].to_numpy(dtype=float)
    end = np.maximum(spans["end_us"].to_numpy(dtype=float), ts)
    incl = f(end) - f(ts)
    keep = incl > 1e-9
    sp = spans[keep]
    ts, end, incl = ts[keep], end[keep], incl[keep]
    order = np.lexsort((-end, ts))
    sp, ts, end, incl = sp.iloc[order], ts[order], end[order], incl[order]
    parent = _parents(ts, end)
    has = parent >= 0
    own = incl - np.bincount(parent[has], weights=incl[has], minlength=incl.size)
    return sp, np.maximum(own, 0.0)


def _parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For spans sorted by (start, -end) that nest, the index of each one's enclosing span (-1: none).

    Vectorised: a span's depth is the number of spans open at its start (earlier starts minus the ends
    at or before it, 10 ns slack); its parent is the last earlier span one level up."""
    n = ts.size
    closed = np.searchsorted(np.sort(end), ts + 0.01, side="right")
    depth = np.arange(n) - closed
    parent = np.full(n, -1, dtype=np.int64)
    pos = np.arange(n)
    for d in range(1, int(depth.max()) + 1 if n else 0):
        kids = pos[depth == d]
        ups = pos[depth == d - 1]
        if not kids.size or not ups.size:
            continue
        j = np.searchsorted(ups, kids, side="left") - 1
        ok = j >= 0
        parent[kids[ok]] = ups[j[ok]]
    return parent


def _union_overlap(spans: pd.DataFrame, claimed: iv.Set) -> float:
    if not len(spans):
        return 0.0
    return iv.total(iv.intersect(iv.union(spans["ts_us"], spans["end_us"]), claimed))


@dataclass(frozen=True)
class HostBound(Detector):
    """
    What it detects
        GPU idle time during which the host thread that launches the GPU's work is busy with
        something other than launching: the timeline's idle_cpu part (host-late gaps over 100 us)
        inside the analysed steps, and its idle_launch part (shorter host-late gaps) when
        launch-bound does not report it (below its share threshold, or a GPU busy over 85%). The launching thread is the one whose cudaLaunchKernel /
        hipLaunchKernel calls correlate with the device's kernels; the CPU ops, annotations and
        Python functions (with_stack) that run on it during the idle stretches say what the host
        was doing instead.

    Why it costs time
        PyTorch runs ahead of the GPU only while the Python thread keeps launching. Any other work on
        that thread (Python logic, CPU tensor math, logging, tokenization, torch.compile
        recompiling, the garbage collector, an inference pipeline's pre/post-processing) empties the
        GPU's queue, and the GPU waits until the next launch. The step then takes as long as the host
        needs, however fast the GPU is.

    How time lost is estimated
        The idle_cpu time of the analysed steps, minus the parts other detectors own: the idle under
        steady-state cudaMalloc/cudaFree calls (allocator-churn) and inside a CPU-side optimizer step
        of an offloaded run (cpu-offload); plus the launch gaps launch-bound would claim when it does
        not report them. What the step would be if the host kept the GPU's queue full is the replay of
        the fix (the finding's "predicted median step with this fix alone"). Each CPU op, annotation
        or Python function is credited with the idle time during which it is the innermost span on
        the launching thread, so the shares do not overlap; idle time with no span is Python between
        ops (or work the profiler did not record). Recognisable culprits (below) are credited with
        the idle time inside any of their spans.

    How to fix
        Depends on what the host does; the finding names it and gives the fix for each culprit:

            # Python / framework overhead per op (many small aten:: ops per kernel)
            model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs
            # torch.compile recompiling in the loop (TORCH_LOGS="recompiles,graph_breaks")
            torch._dynamo.mark_dynamic(batch["input_ids"], 1)
            # CPU-side tensor work: build tensors on the GPU
            mask = torch.ones(b, l, device="cuda")                 # not torch.ones(b, l).cuda()
            # logging in the loop: log every N steps, keep metrics on the GPU
            # tokenization / augmentation on the training thread: move it into the Dataset
            dataset = dataset.map(tokenize, batched=True)
            # garbage-collector pauses
            gc.freeze(); gc.disable()                              # gc.collect() every few hundred steps

    False positives
        The first steps of a run (compilation, cache warm-up) are host-bound by nature: analyse
        steady-state steps (`--steps 2:`). An inference benchmark at batch 1 may be host-bound by
        design. Work the profiler did not record (another thread holding the GIL, untraced C
        extensions) shows as idle time without a named span. The profiler's own settings add host
        time (with_stack per Python call, record_shapes and with_flops per op, profile_memory per
        allocation): the evidence carries that estimate (docs/trace-quality.md, "Profiler
        overhead"), and when it alone could lift the claim over min_frac the confidence is low and
        the fix asks for a re-capture without the costliest settings.

    References
        PyTorch performance tuning guide (CPU overhead, CUDA graphs); torch.compile troubleshooting
        (recompilations, graph breaks); HTA idle-time breakdown (host wait); Python gc docs (gc.freeze).
    """

    code = "TI206"
    fires_on = ("builders_host.build_host_bound",)
    silent_on = ("builders.build_healthy", "builders.build_launch_bound")

    claims_parts = ("idle_cpu", "idle_launch")  # idle_launch only when launch-bound does not report it
    min_frac: float = option(0.03, "minimum share of the analysed steps the GPU idles while the host does other work")
    top_n: int = option(5, "CPU ops / Python functions named in the evidence")

    def whatif(self, graph, finding) -> str:
        """Replay model: the host work during the GPU idle time this finding claims (idle_cpu, and the
        short host-late gaps of idle_launch that launch-bound does not report) leaves the critical path
        (moved to a worker, done once, or compiled away); the rest of the host work stays. Declined below
        its threshold (no finding): the idle time detect() measured, the same unclaimed parts."""
        if finding is not None:
            us = sum(graph.remove_claimed_host_time(finding, p) for p in self.claims_parts)
        else:
            trace = graph.trace
            us = sum(
                graph.remove_host_time(*claims.unclaimed(trace, self.name, p, idle_in_steps(trace, p)))
                for p in self.claims_parts
            )
        if us <= 0:
            return "no host work during GPU idle time in the steps: nothing to change"
        return f"{us / 1e3:.1f} ms of host work during claimed GPU idle time leaves the critical path"

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        if not len(trace.runtime):
            yield self.skip("no CUDA/HIP runtime events: the host's work between launches is not visible")
            return
        idle = idle_in_steps(trace, "idle_cpu")
        cpu_part = claims.unclaimed(trace, self.name, "idle_cpu", idle)
        # short host-late gaps are launch-bound's when it reports them (by its configured thresholds);
        # otherwise they are the host's per-op overhead and belong here (the same gaps, never claimed twice)
        launch_part = claims.unclaimed(trace, self.name, "idle_launch", idle_in_steps(trace, "idle_launch"))
        claimed = iv.union(np.concatenate((cpu_part[0], launch_part[0])), np.concatenate((cpu_part[1], launch_part[1])))
        lost = iv.total(claimed)
        launch_us = iv.total(launch_part)
        win = ctx.window_us
        frac = lost / win if win else 0.0
        n = max(ctx.n_steps, 1)
        if frac < self.min_frac:
            if lost > 0:
                yield self.declined(
                    f"GPU idle while the host does other work {fmt_us(lost / n)}/step ({100 * frac:.1f}%), "
                    f"below the {100 * self.min_frac:g}% threshold"
                )
            return
        tid = launching_thread(trace)
        ops = trace.cpu_ops
        ops = ops[(ops["tid"] == tid).to_numpy()] if tid is not None and len(ops) else ops.iloc[0:0]
        if len(ops):
            ops = ops[~name_flags(ops["name"], _STEP.match)]
        py = trace.python
        py = py[(py["tid"] == tid).to_numpy()] if tid is not None and len(py) else py.iloc[0:0]

        sp, own = self_overlap(ops, claimed)
        named = float(own.sum())
        by_name = (
            (
                pd.Series(own, index=sp["name"].astype(str).to_numpy())
                .groupby(level=0)
                .sum()
                .sort_values(ascending=False)
            )
            if len(sp)
            else pd.Series(dtype=float)
        )
        # ops inside which the thread called the CUDA/HIP runtime (launches, copies: their idle self time is
        # dispatch overhead); an aten op with no runtime call inside its span that is not a metadata-only op
        # (views, empty allocations) computes on CPU tensors
        rt = trace.runtime
        lt = np.sort(rt["ts_us"].to_numpy()[(rt["tid"] == tid).to_numpy()]) if tid is not None else np.empty(0)
        aten = (
            name_flags(sp["name"], lambda x: x.startswith("aten::") and not _METADATA_OP.match(x))
            if len(sp)
            else np.zeros(0, dtype=bool)
        )
        no_kernel = (
            (
                np.searchsorted(lt, sp["end_us"].to_numpy(), side="right")
                == np.searchsorted(lt, sp["ts_us"].to_numpy(), side="left")
            )
            if len(sp)
            else np.zeros(0, dtype=bool)
        )
        cpu_tensor_us = float(own[aten & no_kernel].sum()) if len(sp) else 0.0

        upy = py[~name_flags(py["name"], _LIBRARY_FRAME.match)] if len(py) else py
        psp, pown = self_overlap(upy, claimed)
        by_py = (
            (
                pd.Series(pown, index=psp["name"].astype(str).to_numpy())
                .groupby(level=0)
                .sum()
                .sort_values(ascending=False)
            )
            if len(psp)
            else pd.Series(dtype=float)
        )

        # culprits: idle inside any span (CPU op, annotation or Python function) whose name matches
        found: list[tuple[float, str, str, str]] = []
        short = dict(SHORT)
        taken = iv.EMPTY
        for key, what, fix, rx in CULPRITS:
            m = [t[name_flags(t["name"], rx.search)] for t in (ops, py) if len(t)]
            m = [t for t in m if len(t)]
            if not m:
                continue
            s = iv.subtract(
                iv.intersect(
                    iv.union(
                        np.concatenate([t["ts_us"].to_numpy() for t in m]),
                        np.concatenate([t["end_us"].to_numpy() for t in m]),
                    ),
                    claimed,
                ),
                taken,
            )
            us = iv.total(s)
            if us >= 0.05 * lost:
                if key == "preprocess":  # name what it is: the matched spans, else the model family
                    kinds = preprocessing_kinds(trace, {str(n) for t in m for n in t["name"].astype(str).unique()})
                    what, fix = preprocess_culprit(kinds)
                    short["preprocess"] = f"input preprocessing ({kinds})"
                found.append((us, key, what, fix))
                taken = iv.union(np.concatenate((taken[0], s[0])), np.concatenate((taken[1], s[1])))
        rest = max(lost - iv.total(taken), 0.0)
        if cpu_tensor_us >= 0.05 * lost and cpu_tensor_us <= rest + 1e-6:
            found.append((cpu_tensor_us, *CPU_TENSOR))
            rest -= cpu_tensor_us
        if rest >= 0.05 * lost:
            found.append((rest, *OVERHEAD))
        found.sort(key=lambda x: -x[0])
        keys = {f[1] for f in found}
        if "preprocess" in keys and "pipeline" in keys:  # an inference pipeline preprocessing inline
            found = [
                (us, key, what, PIPELINE_PREPROCESS_FIX if key == "preprocess" else fix) for us, key, what, fix in found
            ]

        w = window_label(trace)
        ev = [
            Evidence(
                label="GPU idle while the launching thread does other work",
                value=round(lost / n / 1e3, 3),
                unit="ms/step",
                window=w,
            ),
            Evidence(label="share of step time", value=round(100 * frac, 1), unit="%", window=w),
            Evidence(label="launching thread", value=f"CPU thread {tid}" if tid is not None else "unknown", unit=""),
        ]
        if launch_us > 0:
            ev.append(
                Evidence(
                    label="of which short launch gaps (<= 100 us; launch-bound does not report them)",
                    value=round(launch_us / n / 1e3, 3),
                    unit="ms/step",
                    window=w,
                )
            )
        for name, us in by_name.head(self.top_n).items():
            if us >= 0.01 * lost:
                ev.append(
                    Evidence(
                        label=f"CPU op / annotation during the idle time: {name}",
                        value=round(100 * us / lost, 1),
                        unit="% of it",
                        window=w,
                    )
                )
        for name, us in by_py.head(3).items():
            if us >= 0.01 * lost:
                ev.append(
                    Evidence(
                        label=f"Python function during the idle time: {name}",
                        value=round(100 * us / lost, 1),
                        unit="% of it",
                        window=w,
                    )
                )
        ev.append(
            Evidence(
                label="idle time with no CPU op on the launching thread (Python between ops, untraced work)",
                value=round(100 * max(lost - named, 0.0) / lost, 1),
                unit="%",
                window=w,
            )
        )
        for us, key, what, _ in found:
            ev.append(Evidence(label=f"culprit: {what}", value=round(100 * us / lost, 1), unit="% of it", window=w))
        if not len(ops):
            ev.append(
                Evidence(
                    label="diagnosis",
                    value="no CPU ops recorded on the launching thread: capture with "
                    "record_shapes / with_stack to see what the host does",
                    unit="",
                )
            )
        top = found[0] if found else (lost, *OVERHEAD)
        lead = [(nm, us) for nm, us in list(by_name.head(1).items()) + list(by_py.head(1).items()) if us >= 0.1 * lost]
        lead.sort(key=lambda x: -x[1])
        title = (
            f"Host-bound: the GPU idles {fmt_us(lost / n)} per step ({pct(frac)}) while the launching thread "
            f"does other work, mostly {short[top[1]]}"
            + (f" (top: {lead[0][0][:80]}, {pct(lead[0][1] / lost)} of it)" if lead else "")
        )
        fixes = [f for _, _, _, f in found[:2]] or [OVERHEAD[2]]
        if len(fixes) == 2 and "reduce-overhead" in fixes[0] and "reduce-overhead" in fixes[1]:
            fixes = fixes[:1]  # the same remedy twice
        fix = "; then ".join(fixes)
        fix = fix[0].upper() + fix[1:] + "."
        coverage = (named + iv.total(taken)) / lost if lost else 0.0
        conf = "low" if not len(ops) else ("high" if frac >= 0.1 and min(coverage, 1.0) >= 0.5 else "medium")
        # the profiler's own settings add host time on the launching thread, which a host-bound step turns
        # into GPU idle: a claim that the estimate alone could lift over min_frac may be the profiler's
        ov = profiler_overhead(trace)
        ev += overhead_evidence(ov, w)
        recapture = ov.covering(lost, self.min_frac * win)
        if recapture:
            conf = "low"
            fix = overhead_fix(ov, recapture, self.min_frac, fix)
        events = (
            tuple(
                EventRef(
                    name=str(nm),
                    ts_us=round(float(r.ts_us), 3),
                    dur_us=round(float(r.end_us - r.ts_us), 3),
                    track=f"CPU thread {tid}",
                )
                for nm, r in ((r.name, r) for r in sp.assign(own=own).nlargest(3, "own").itertuples(index=False))
            )
            if len(sp)
            else ()
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence=conf,
            evidence=ev,
            fix=fix,
            events=events,
            idle_claims={"idle_cpu": cpu_part, "idle_launch": launch_part},
        )
