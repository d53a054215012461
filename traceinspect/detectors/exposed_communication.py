"""exposed-communication: NCCL/RCCL collective time that no compute kernel overlaps."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts.device import primary_kernels
from ..facts.steps import step_set
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.timeline import is_comm_kernel
from ..trace.ranks import collective_names
from .base import Detector, events_from, fmt_us, option, pct, window_label

# 4 bytes per element when the trace records no dtype: no gradient or parameter collective uses wider
# elements, so numel * 4 / duration bounds the achieved algorithm bandwidth from above.
MAX_ELEM_BYTES = 4
# more collectives than this per step are per-tensor calls, not DDP/FSDP buckets
MANY_COLLECTIVES = 50

# bytes per element, by the spellings PyTorch writes: `dtype` of record_param_comms ("BFloat16"),
# `Input type` of the nccl:* annotation ("c10::BFloat16", "float"), NCCL kernel name suffixes ("bf16")
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "f32": 4,
    "int": 4,
    "int32": 4,
    "int32_t": 4,
    "uint32": 4,
    "uint32_t": 4,
    "double": 8,
    "float64": 8,
    "f64": 8,
    "long": 8,
    "int64": 8,
    "int64_t": 8,
    "uint64": 8,
    "uint64_t": 8,
    "bfloat16": 2,
    "bf16": 2,
    "half": 2,
    "float16": 2,
    "f16": 2,
    "short": 2,
    "int16": 2,
    "char": 1,
    "byte": 1,
    "bool": 1,
    "int8": 1,
    "int8_t": 1,
    "uint8": 1,
    "uint8_t": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}
# NCCL kernel names carry the element type among their parts: ncclKernel_AllReduce_RING_LL_Sum_float(...)
# (NCCL before 2.19), ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...) (2.19 on)
_KERNEL_PARTS = re.compile(r"[A-Za-z0-9]+")

# nccl-tests (doc/PERFORMANCE.md): busbw = algbw * factor(n), with S the larger of the in/out buffers
_BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send/recv": lambda n: 1.0,
}

# GPU-to-GPU bandwidth per GPU and direction inside one node (GB/s), what busbw approaches at large sizes
_LINK_GBPS = (
    ("b200", 900, "NVLink 5"),
    ("h200", 450, "NVLink 4"),
    ("gh200", 450, "NVLink 4"),
    ("h100 pcie", 64, "PCIe 5"),
    ("h100", 450, "NVLink 4"),
    ("h800", 200, "NVLink 4"),
    ("a100 80gb pcie", 32, "PCIe 4"),
    ("a100-pcie", 32, "PCIe 4"),
    ("a100", 300, "NVLink 3"),
    ("a800", 200, "NVLink 3"),
    ("v100-pcie", 16, "PCIe 3"),
    ("v100", 150, "NVLink 2"),
    ("mi300x", 448, "Infinity Fabric, 7 links"),
)


def dtype_bytes(name) -> int | None:
    """Bytes per element of a dtype as a trace spells it; None when unknown."""
    if not isinstance(name, str) or not name:
        return None
    key = name.strip().lower().removeprefix("c10::").removeprefix("torch.").removeprefix("at::")
    return _DTYPE_BYTES.get(key)


def bus_factor(collective: str, n: int) -> float | None:
    """nccl-tests' busbw / algbw for a collective over n ranks; None when unknown."""
    f = _BUS_FACTOR.get(collective)
    return f(n) if f is not None and n >= 1 else None


def link_gbps(gpu_name: str | None) -> tuple[float, str] | None:
    low = (gpu_name or "").lower()
    return next(((bw, what) for key, bw, what in _LINK_GBPS if key in low), None)


@dataclass(frozen=True)
class ExposedCommunication(Detector):
    """
    What it detects
        Time in the analysed steps when an NCCL/RCCL collective kernel (all-reduce, all-gather,
        reduce-scatter, broadcast, all-to-all, send/recv) runs on the GPU and no compute kernel
        does: the timeline's "comm" part. Evidence: collective kernels per step by collective
        (the kernel's `Collective name` arg, else its name), total collective kernel time, the
        overlapped share (HTA's comm/comp overlap: compute during communication / communication
        time), exposed time per step, and the long collectives' achieved bandwidth by the
        nccl-tests conventions (algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce,
        (n-1)/n for all-gather, reduce-scatter, all-to-all) with bytes from the element counts and
        the dtype the trace records (4 B per element, an upper bound, only when no dtype is
        recorded), compared with the GPU-to-GPU link bandwidth on one node of a known GPU.

    Why it costs time
        DDP launches each gradient bucket's all-reduce as soon as the bucket is ready, so most of
        it hides behind the rest of backward; FSDP prefetches the next all-gather. Communication
        that no compute covers is time the step waits on the network. When a collective kernel
        lasts far longer than its bytes need, it is waiting for a slower rank (a straggler:
        data loading, uneven batches, a slow GPU or host), since NCCL kernels start as soon as
        they are launched on each rank and spin until every peer arrives.

    How time lost is estimated
        The exposed communication time (collective kernel time minus the part overlapped by
        compute kernels on the same GPU), summed over the analysed steps. It is an upper bound:
        the last bucket's all-reduce after backward cannot overlap anything, and the wire time of
        the bytes remains; the waiting part is recovered only by fixing the slower rank.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before
            args = TrainingArguments(..., per_device_train_batch_size=4, gradient_accumulation_steps=1)
            # after: fewer all-reduces per sample, larger buckets, no unused-parameter scan
            args = TrainingArguments(..., per_device_train_batch_size=8, gradient_accumulation_steps=4,
                                     ddp_bucket_cap_mb=100, ddp_find_unused_parameters=False)
            # FSDP: fsdp_config={"forward_prefetch": True, "backward_prefetch": "backward_pre",
            #                    "limit_all_gathers": True}

        Plain PyTorch:

            # before
            model = DDP(model, device_ids=[rank])
            for x, y in loader:
                loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
            # after
            model = DDP(model, device_ids=[rank], bucket_cap_mb=100, gradient_as_bucket_view=True)
            for i, (x, y) in enumerate(loader):
                sync = (i + 1) % accum == 0
                with (contextlib.nullcontext() if sync else model.no_sync()):
                    loss_fn(model(x), y).backward()
                if sync:
                    opt.step(); opt.zero_grad()
            # FSDP: FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            #            limit_all_gathers=True)

        If the collectives are waiting rather than moving data, find the rank they wait for first:
        analyse every rank's trace together (`traceinspect analyze DIR`), which aligns the
        collectives across ranks and names the rank that gates the step (docs/multi-rank.md); fix
        its data loading, batch imbalance or host contention.

    False positives
        A single-GPU trace has no collectives and is skipped. The first steps after start-up
        include NCCL communicator setup; analyse steady-state steps. A rank that waits is not the
        slow one: the exposed time on this rank can be caused by another rank, and one rank's
        trace cannot tell which ("waits for another rank (cannot tell which from one trace)").

    References
        HTA comm/comp overlap and temporal breakdown docs; TensorBoard profiler plugin's
        communication rule (> 10% of the step); PyTorch DDP notes (bucket_cap_mb,
        gradient_as_bucket_view, no_sync); FSDP docs (forward_prefetch, limit_all_gathers);
        NVIDIA/nccl#739 (kernel names do not tell the operation).
    """

    code = "TI203"
    fires_on = ("builders_transfer.build_exposed_nccl", "builders_transfer.build_straggler_nccl")
    silent_on = (
        "builders.build_healthy",
        "builders_transfer.build_overlapped_nccl",
        "builders_transfer.build_cpu_offload",
    )

    min_frac: float = option(
        0.05,
        "minimum share of the step time with communication exposed (half the TB "
        "plugin's 10% communication rule, since only the exposed part is counted)",
    )
    wait_bw_gbps: float = option(
        5.0,
        "collectives achieving at most this bus bandwidth (GB/s; algbw when the "
        "collective is unknown) on one node are waiting for other ranks rather "
        "than moving data",
    )
    min_wait_kernel_us: float = option(1000.0, "only collective kernels at least this long are used for the bandwidth")

    def whatif(self, graph, finding) -> str:
        """Replay model: overlap. Inside the analysed steps, a compute op (any GPU op that is not a
        collective) no longer waits for a collective on another stream: the inferred cross-stream edges
        from communication to compute are relaxed, so the collectives overlap the compute that follows
        them (prefetched all-gathers, bucketed all-reduces that run under the rest of the step). The step
        still cannot end before its communication: the last compute op of each step on each stream that
        waited for a collective keeps (or gets) a wait for the step's last collective. Communication
        itself keeps its duration and what it waits for. An upper bound on overlap: data dependencies
        the trace does not show (the optimizer needs the reduced gradients) are only kept by that final
        wait."""
        trace = graph.trace
        if not len(graph.g_ts):
            return "no GPU ops: nothing to change"
        is_comm = np.asarray(is_comm_kernel(graph.g_name), dtype=bool) & (graph.g_kind == "kernel")
        if not is_comm.any():
            return "no collective kernels: nothing to change"
        inside = graph.gpu_in_steps()
        x = graph.g_xprev
        relax = inside & ~is_comm & (x >= 0) & is_comm[np.maximum(x, 0)]
        if not relax.any():
            return "no compute op waits for a collective inside the steps: nothing to change"
        graph.g_xprev = np.where(relax, -1, x)
        # the final wait: per step and stream, the last compute op keeps a wait for the step's last collective
        st = trace.steps
        step = np.searchsorted(st["start_us"].to_numpy(), graph.g_ts, side="right") - 1
        kept = 0
        for i in np.unique(step[relax]):
            in_step = inside & (step == i)
            comm = np.flatnonzero(in_step & is_comm)
            last_comm = comm[np.argmax(graph.g_end[comm])]
            for s_ in np.unique(graph.g_stream[relax & (step == i)]):
                ops = np.flatnonzero(in_step & ~is_comm & (graph.g_stream == s_))
                last = ops[np.argmax(graph.g_ts[ops])]
                if graph.g_ts[last] >= graph.g_end[last_comm]:
                    graph.g_xprev[last] = last_comm
                    # the slack was measured from a ready time without this wait: never start later than measured
                    graph.g_slack[last] = min(graph.g_slack[last], graph.g_ts[last] - graph.g_end[last_comm])
                    kept += 1
        return (
            f"{int(relax.sum())} compute op(s) stop waiting for collectives and overlap them; "
            f"{kept} final wait(s) at the steps' ends kept"
        )

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        k = primary_kernels(trace)
        tl = trace.timeline
        st = trace.steps
        steps_set = step_set(trace)
        comm = k[is_comm_kernel(k["name"])] if len(k) else k
        if len(comm):
            inside = iv.per_window(steps_set, comm["ts_us"].to_numpy(), comm["end_us"].to_numpy()) > 0
            comm = comm[inside]
        if not len(comm):
            yield self.skip("no NCCL/RCCL collective kernels in the analysed steps (single-GPU run)")
            return
        comm_set = iv.intersect(iv.union(comm["ts_us"], comm["end_us"]), steps_set)
        comm_us = iv.total(comm_set)
        exposed = tl.total("comm")
        frac = exposed / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"collectives present, {100 * frac:.1f}% of the window not overlapped with compute, "
                f"below the {100 * self.min_frac:g}% threshold"
            )
            return
        n = max(ctx.n_steps, 1)
        w = window_label(trace)
        overlap = 1.0 - exposed / comm_us if comm_us > 0 else 0.0
        per_step = tl.per_step["comm_us"].to_numpy()
        share = per_step / tl.per_step["dur_us"].to_numpy()
        colls = collective_names(comm)
        ev = [
            Evidence(
                label="exposed communication (no compute kernel running)",
                value=round(exposed / n / 1e3, 2),
                unit="ms/step",
                window=w,
            ),
            Evidence(
                label="share of step time (min..max per step)",
                value=f"{100 * share.min():.1f}..{100 * share.max():.1f}",
                unit="%",
                window=w,
            ),
            Evidence(label="collective kernel time", value=round(comm_us / n / 1e3, 2), unit="ms/step", window=w),
            Evidence(
                label="overlapped with compute (HTA comm/comp overlap)",
                value=round(100 * overlap, 1),
                unit="%",
                window=w,
            ),
        ]
        g = pd.DataFrame({"coll": colls, "dur": comm["dur_us"].to_numpy()}).groupby("coll")["dur"].agg(["count", "sum"])
        g = g.sort_values("sum", ascending=False)
        for coll, r in g.iterrows():
            ev.append(
                Evidence(
                    label="collective kernels without a Collective name" if coll == "unknown" else f"{coll} kernels",
                    value=f"{r['count'] / n:.1f}/step, {r['sum'] / n / 1e3:.2f} ms/step",
                    unit="",
                    window=w,
                )
            )
        longest = comm.loc[comm["dur_us"].idxmax()]
        med_step = float(np.median(st["dur_us"].to_numpy()))
        ev.append(
            Evidence(
                label="longest collective kernel",
                value=round(float(longest["dur_us"]) / 1e3, 2),
                unit=f"ms ({pct(float(longest['dur_us']) / med_step)} of the median step)",
            )
        )
        bw = self._bandwidth(trace, comm)
        waiting = False
        if bw is not None:
            dt = (
                "dtype from the trace"
                if bw["dtype_known"]
                else f"upper bound at {MAX_ELEM_BYTES} B/element, no dtype recorded"
            )
            ev.append(
                Evidence(
                    label=f"collective algorithm bandwidth, nccl-tests algbw ({dt}; kernels >= "
                    f"{fmt_us(self.min_wait_kernel_us)})",
                    value=round(bw["algbw"], 2),
                    unit="GB/s",
                    window=w,
                )
            )
            if bw["busbw"] is not None:
                ev.append(
                    Evidence(
                        label=f"bus bandwidth, nccl-tests busbw ({bw['coll']}, {bw['n']} ranks)",
                        value=round(bw["busbw"], 2),
                        unit="GB/s",
                        window=w,
                    )
                )
            link = link_gbps(trace.device.name if trace.device is not None else None)
            if link is not None and bw["busbw"] is not None and _single_node(trace):
                ev.append(
                    Evidence(
                        label=f"expected GPU-to-GPU bandwidth ({link[1]}, per direction)",
                        value=link[0],
                        unit=f"GB/s (busbw reaches {pct(bw['busbw'] / link[0])} of it)",
                    )
                )
            waiting = (bw["busbw"] if bw["busbw"] is not None else bw["algbw"]) <= self.wait_bw_gbps and _single_node(
                trace
            )
        if trace.meta.world_size:
            ev.append(Evidence(label="ranks (world size)", value=int(trace.meta.world_size), unit=""))
        known = [c for c in g.index if c != "unknown"]
        top = str(known[0]) if known else "NCCL/RCCL"
        title = (
            f"{fmt_us(exposed / n)} per step ({pct(frac)}) of {top} communication is not overlapped with compute"
            f" ({pct(overlap)} overlapped)"
        )
        if waiting:
            title += (
                f"; collectives move {'at most ' if not bw['dtype_known'] else ''}{bw['algbw']:.2f} GB/s, so "
                "they mostly wait for another rank (cannot tell which from one trace)"
            )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=exposed,
            confidence="high" if frac >= 0.15 else "medium",
            evidence=ev,
            fix=_fix(ctx.framework, set(g.index), waiting, len(comm) / n),
            upper_bound=True,
            events=events_from(comm, trace, "kernel", 3),
        )

    def _bandwidth(self, trace, comm: pd.DataFrame) -> dict | None:
        """nccl-tests algbw (bytes / duration) and busbw over the long collective kernels whose size the
        trace records: bytes = elements (the kernel's In/Out msg nelems, else the launching op's input
        shapes) times the element size of the dtype the trace records (4 B, an upper bound, when none)."""
        ops = trace.cpu_ops
        long = comm[comm["dur_us"] >= self.min_wait_kernel_us]
        if not len(long):
            return None
        colls = collective_names(long)
        total_b = total_t = 0.0
        known = True
        kinds, sizes = set(), set()
        for r, coll in zip(long.itertuples(index=False), colls):
            nelems = max(int(r.in_msg_nelems), int(r.out_msg_nelems))
            op = int(r.op_idx)
            if nelems <= 0 and op >= 0 and len(ops):
                nelems = _numel(trace.shapes(ops["input_dims_raw"].iat[op]))
            if nelems <= 0:
                continue
            eb = dtype_bytes(r.comm_dtype) or (_op_dtype_bytes(trace, op) if op >= 0 and len(ops) else None)
            if eb is None and coll != "send/recv":  # send/recv kernels are named for int8_t whatever is sent
                eb = _kernel_dtype_bytes(str(r.name))
            if eb is None:
                eb, known = MAX_ELEM_BYTES, False
            total_b += nelems * eb
            total_t += float(r.dur_us)
            kinds.add(coll)
            if int(r.group_size) > 0:
                sizes.add(int(r.group_size))
        if total_t <= 0:
            return None
        algbw = total_b / total_t / 1e3
        n = max(sizes) if sizes else int(trace.meta.world_size or 0)
        coll = next(iter(kinds)) if len(kinds) == 1 else None
        factor = bus_factor(coll, n) if coll is not None and n else None
        return {
            "algbw": algbw,
            "busbw": algbw * factor if factor is not None else None,
            "coll": coll,
            "n": n,
            "dtype_known": known,
        }


def _kernel_dtype_bytes(name: str) -> int | None:
    head = name.split("(", 1)[0]
    if not re.match(r"(?:nccl|rccl)", head, re.IGNORECASE):
        return None
    sizes = {dtype_bytes(p) for p in _KERNEL_PARTS.findall(head)} - {None}
    return sizes.pop() if len(sizes) == 1 else None


def _op_dtype_bytes(trace, op: int) -> int | None:
    """Element size from the launching op: its own `Input type`, else that of the nccl:* annotation it
    encloses on the same thread (record_param_comms types its input as "TensorList")."""
    ops = trace.cpu_ops
    for i in _op_and_children(ops, op):
        raw = ops["input_type_raw"].iat[i]
        types = trace.shapes(raw) if raw is not None else None
        if isinstance(types, list):
            for t in types:
                eb = dtype_bytes(t) if isinstance(t, str) else None
                if eb is not None:
                    return eb
    return None


def _op_and_children(ops: pd.DataFrame, op: int, limit: int = 8) -> list[int]:
    ts, end, tid = float(ops["ts_us"].iat[op]), float(ops["end_us"].iat[op]), ops["tid"].iat[op]
    t = ops["ts_us"].to_numpy()
    lo, hi = np.searchsorted(t, ts, "left"), np.searchsorted(t, end, "right")
    if not np.all(np.diff(t[lo:hi]) >= 0):  # not sorted: no child lookup
        return [op]
    kids = [
        i
        for i in range(int(lo), int(hi))
        if i != op and ops["tid"].iat[i] == tid and float(ops["end_us"].iat[i]) <= end
    ][:limit]
    return [op] + kids


def _numel(shapes) -> int:
    """Elements of the first argument (a tensor or a tensor list) of a collective op."""
    if not isinstance(shapes, list) or not shapes:
        return 0
    first = shapes[0]
    if isinstance(first, list) and first and all(isinstance(s, list) for s in first):
        tensors = first
    else:
        tensors = [first]
    total = 0
    for s in tensors:
        if not isinstance(s, list) or not all(isinstance(d, int) for d in s):
            return 0
        total += int(np.prod(s)) if s else 1
    return total


def _single_node(trace) -> bool:
    """All ranks see one node's GPUs: the world is no larger than the devices listed in the trace."""
    ws = trace.meta.world_size
    return bool(ws) and len(trace.meta.devices) >= ws


def _fix(framework: str, colls: set, waiting: bool, per_step: float) -> str:
    hf = framework in ("hf_trainer", "trl", "accelerate")
    parts = []
    if per_step >= MANY_COLLECTIVES:
        parts.append(
            f"coalesce the {per_step:.0f} collectives per step into a few large ones (bucket the tensors, "
            "e.g. DDP instead of per-tensor all_reduce, or torch.distributed coalescing)"
        )
    if waiting:
        parts.append(
            "Find the rank this one waits for first: the collectives wait rather than transfer; analyse "
            "all ranks' traces together (traceinspect analyze DIR) to name the rank that gates the step, "
            "and fix its data loading, host work or load imbalance"
        )
    if colls & {"allgather", "reduce_scatter"}:
        parts.append(
            "prefetch FSDP all-gathers (fsdp_config forward_prefetch / backward_prefetch='backward_pre', "
            "limit_all_gathers)"
            if hf
            else "prefetch FSDP all-gathers (forward_prefetch=True, backward_prefetch=BACKWARD_PRE, "
            "limit_all_gathers=True)"
        )
    if colls & {"allreduce", "cross_device_reduce", "unknown", "broadcast", "reduce"} or not parts:
        parts.append(
            "all-reduce less often and overlap it with backward: raise gradient_accumulation_steps and "
            "tune ddp_bucket_cap_mb (ddp_find_unused_parameters=False)"
            if hf
            else "all-reduce less often and overlap it with backward: accumulate gradients under "
            "model.no_sync(), tune DDP(bucket_cap_mb=..., gradient_as_bucket_view=True)"
        )
    if colls & {"all_to_all", "send/recv"}:
        parts.append(
            "overlap all-to-all/send-recv with compute (pipeline embedding or expert exchanges) or use a "
            "larger per-GPU batch"
        )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
