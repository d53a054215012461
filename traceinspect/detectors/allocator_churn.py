"""allocator-churn: device memory allocated and freed through the driver inside steady-state steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts.model_family import family_of
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from .base import Detector, events_from, fmt_us, in_steps, option, pct, window_label

# blocking driver allocations; stream-ordered cudaMallocAsync/cudaFreeAsync are not churn
ALLOC_CALLS = {
    "cudaMalloc",
    "cudaFree",
    "cuMemAlloc",
    "cuMemAlloc_v2",
    "cuMemFree",
    "cuMemFree_v2",
    "hipMalloc",
    "hipFree",
    "hipExtMallocWithFlags",
    "hipMallocManaged",
    "cudaHostAlloc",
    "cudaMallocHost",
    "cudaFreeHost",
    "hipHostMalloc",
    "hipHostFree",
}
_ALLOC_CBIDS = {20, 22}  # cudaMalloc, cudaFree when CUPTI names the call "INVALID"


# idle under a blocking allocation call is the call's doing, whatever the host-late rule labelled it;
# idle_sync (host-sync) and idle_dataloader (dataloader-stall) keep theirs
CLAIMED_PARTS = ("idle_launch", "idle_cpu", "idle_unknown")


def _alloc_rows(rt: pd.DataFrame) -> pd.DataFrame:
    if not len(rt):
        return rt
    mask = name_flags(rt["name"], ALLOC_CALLS) | (
        name_flags(rt["name"], {"INVALID"}) & rt["cbid"].isin(_ALLOC_CBIDS).to_numpy()
    )
    return rt[mask]


def steady_alloc_calls(trace) -> pd.DataFrame:
    """Allocation/free runtime calls inside the analysed steps except the first (allocator warm-up)."""
    st = trace.steps
    rt = trace.runtime
    if len(st) < 2 or not len(rt):
        return rt.iloc[0:0]
    calls = in_steps(_alloc_rows(rt), trace)
    return calls[calls["ts_us"] >= float(st["end_us"].iloc[0])]


def steady_alloc_set(trace) -> iv.Set:
    """Host time inside steady-state allocation calls: allocator-churn owns the GPU idle under it."""
    c = steady_alloc_calls(trace)
    return iv.union(c["ts_us"], c["end_us"]) if len(c) else iv.EMPTY


@dataclass(frozen=True)
class AllocatorChurn(Detector):
    """
    What it detects
        `cudaMalloc` / `cudaFree` (`hipMalloc` / `hipFree`, pinned `cudaHostAlloc` / `cudaFreeHost`)
        runtime calls inside steady-state steps, i.e. every analysed step after the first, and the
        GPU idle time under them.

    Why it costs time
        PyTorch's caching allocator should serve every tensor from memory it already holds after the
        first iteration. When it cannot (shapes that change every step, memory pressure that forces
        it to release and re-reserve, `torch.cuda.empty_cache()` in the loop, or caching disabled with
        `PYTORCH_NO_CUDA_MEMORY_CACHING=1`) it calls the driver. `cudaFree` waits for the whole device
        to finish, and `cudaMalloc` is on CUDA's implicit-synchronisation list, so the GPU drains
        and idles while the host is inside the call.

    How time lost is estimated
        The GPU idle time that overlaps these calls in steady-state steps, taken from the timeline's
        launch and other-CPU idle parts (idle_launch, idle_cpu). Launch-bound does not claim idle
        time under these calls; idle already attributed to a synchronising call (idle_sync) is left
        to host-sync, and idle after the call returns (the host relaunching) is not counted. The
        first analysed step is excluded as allocator warm-up; a trace with one step is skipped. Point
        estimate: with a warm cache the calls disappear.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before: every batch padded to its own longest sequence
            args = TrainingArguments(..., group_by_length=False)
            # after: a few bucket sizes the allocator can reuse (text models; 64 is an example)
            collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=64)
            # and in the launch environment
            PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

        Plain PyTorch:

            # before
            for batch in loader:
                loss = model(batch).loss; loss.backward(); opt.step()
                torch.cuda.empty_cache()
            # after: no empty_cache() in the loop, static (bucketed) shapes, and
            # os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  (before importing torch)
            # never set PYTORCH_NO_CUDA_MEMORY_CACHING=1 outside debugging

    False positives
        The first steps after a change of batch shape, an evaluation loop, or a checkpoint legitimately
        allocate; analyse later steps (`--steps 2:`). Allocations on other threads that overlap busy
        GPU time cost nothing and are not counted.

    References
        PyTorch CUDA semantics: memory management, PYTORCH_CUDA_ALLOC_CONF (expandable_segments),
        PYTORCH_NO_CUDA_MEMORY_CACHING; CUDA C Programming Guide, implicit synchronisation.
    """

    code = "TI205"
    fires_on = ("builders_host.build_allocator_churn",)
    silent_on = ("builders.build_healthy", "builders_host.build_allocator_warmup")

    claims_parts = CLAIMED_PARTS
    reserves = ("idle_launch", "idle_cpu")  # the GPU idle under its allocation calls
    min_frac: float = option(0.02, "minimum share of the analysed steps the GPU idles under allocation calls")
    no_cache_calls: int = option(100, "allocation calls per step above which the caching allocator looks disabled")

    def reserved(self, trace) -> iv.Set:
        return steady_alloc_set(trace)

    def whatif(self, graph, finding) -> str:
        """Replay model: with a warm cache (static shapes, no empty_cache()) the steady-state allocation
        calls (every analysed step after the first) disappear: their host cost goes and a cudaFree /
        cudaMalloc no longer waits for the device to drain. The host work around them stays. Source:
        PyTorch's caching allocator serves repeated shapes from memory it holds (CUDA semantics notes)."""
        calls = steady_alloc_calls(graph.trace)
        if finding is None or not len(calls):
            return "no steady-state allocation calls: nothing to change"
        m = graph.host_call_mask(calls.index.to_numpy())
        graph.drop_host_calls(m)
        return f"{int(m.sum())} steady-state cudaMalloc/cudaFree call(s) disappear (no host cost, no device wait)"

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        if not len(trace.runtime):
            yield self.skip("no CUDA/HIP runtime events: allocation calls are not visible")
            return
        st = trace.steps
        if len(st) < 2:
            yield self.skip("one analysed step: warm-up allocations cannot be told from steady-state churn")
            return
        calls = steady_alloc_calls(trace)
        if not len(calls):
            return
        tl = trace.timeline
        cset = iv.union(calls["ts_us"], calls["end_us"])
        steady = iv.union(st["start_us"].iloc[1:], st["end_us"].iloc[1:])
        under = iv.intersect(cset, steady)
        claims = {p: iv.intersect(tl.sets[p], under) for p in CLAIMED_PARTS}
        lost = sum(iv.total(c) for c in claims.values())
        synced = iv.total(iv.intersect(tl.sets["idle_sync"], under))
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"{len(calls)} steady-state allocation call(s), GPU idle under them {100 * frac:.1f}% of "
                f"the window, below the {100 * self.min_frac:g}% threshold"
            )
            return
        n_steady = len(st) - 1
        w = f"steps 2..{len(st)} of {window_label(trace)}"
        names = calls["name"].astype(str).value_counts()
        per_name = ", ".join(f"{n} {c / n_steady:.1f}" for n, c in names.items())
        host = float(calls["dur_us"].sum())
        longest = calls.nlargest(1, "dur_us").iloc[0]
        ev = [
            Evidence(
                label="GPU idle under allocation calls", value=round(lost / n_steady / 1e3, 3), unit="ms/step", window=w
            ),
            Evidence(label="share of analysed time", value=round(100 * frac, 1), unit="%", window=window_label(trace)),
            Evidence(label="allocation calls per steady-state step", value=per_name, unit="calls/step", window=w),
            Evidence(
                label="host time in allocation calls", value=round(host / n_steady / 1e3, 3), unit="ms/step", window=w
            ),
            Evidence(label="longest call", value=f"{longest['name']} {fmt_us(float(longest['dur_us']))}", unit=""),
        ]
        if synced > 0:
            ev.append(
                Evidence(
                    label="idle under these calls already attributed to host syncs (not counted)",
                    value=round(synced / n_steady / 1e3, 3),
                    unit="ms/step",
                    window=w,
                )
            )
        mem = trace.memory
        if len(mem):
            m = in_steps(mem, trace)
            m = m[m["ts_us"] >= float(st["end_us"].iloc[0])]
            if len(m):
                res = m["total_reserved_bytes"].to_numpy()
                changes = int(np.count_nonzero(np.diff(res)))
                if changes:
                    ev.append(
                        Evidence(
                            label="reserved-memory changes in steady-state steps ([memory] events)",
                            value=changes,
                            unit="changes",
                            window=w,
                        )
                    )
        no_cache = len(calls) / n_steady >= self.no_cache_calls
        if no_cache:
            ev.append(
                Evidence(
                    label="diagnosis",
                    value="allocation calls on nearly every tensor: the caching "
                    "allocator looks disabled (PYTORCH_NO_CUDA_MEMORY_CACHING=1?)",
                    unit="",
                )
            )
        title = (
            f"{len(calls) / n_steady:.0f} cudaMalloc/cudaFree calls per steady-state step stall the GPU "
            f"{fmt_us(lost / n_steady)} per steady-state step ({pct(frac)} of the analysed time)"
        )
        if trace.is_rocm:
            title = title.replace("cudaMalloc/cudaFree", "hipMalloc/hipFree")
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="high" if frac >= 0.05 else "medium",
            evidence=ev,
            fix=self._fix(ctx, no_cache, family_of(trace)),
            events=events_from(calls, trace, "runtime"),
            idle_claims=claims,
        )

    @staticmethod
    def _fix(ctx, no_cache: bool, family: str = "unknown") -> str:
        if no_cache:
            return (
                "Re-enable the caching allocator (unset PYTORCH_NO_CUDA_MEMORY_CACHING) and set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
            )
        hf = ctx.framework in ("hf_trainer", "trl")
        # static shapes, in the model family's terms (facts/model_family.py); the pad multiple is an example
        if family == "vision":
            static = "Keep input shapes static (one image size per batch, drop_last=True)"
        elif family == "language" or (hf and family == "unknown"):
            static = "Keep shapes static (pad sequences to a few bucket sizes, for example pad_to_multiple_of=64 in the data collator)"
        else:
            static = "Keep shapes static (pad variable-size inputs to a few bucket sizes)"
        where = "callbacks" if hf else "the training loop"
        return (
            f"{static}, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and remove torch.cuda.empty_cache() "
            f"from {where}."
        )
