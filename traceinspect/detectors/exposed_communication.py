"""exposed-communication: NCCL/RCCL collective time that no compute kernel overlaps."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.timeline import is_comm_kernel
from .base import Detector, events_from, fmt_us, option, pct, window_label

_KERNEL_COLL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_CANON = {"allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather",
          "all_gather": "allgather", "_allgather_base": "allgather", "allgather_into_tensor_coalesced": "allgather",
          "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
          "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
          "broadcast": "broadcast", "sendrecv": "send/recv", "send": "send/recv", "recv": "send/recv",
          "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
          "reduce": "reduce", "gather": "gather", "scatter": "scatter", "barrier": "barrier"}
# 4 bytes per element: no gradient or parameter collective uses wider elements, so numel * 4 / duration
# bounds the achieved algorithm bandwidth from above whatever the dtype.
MAX_ELEM_BYTES = 4
# more collectives than this per step are per-tensor calls, not DDP/FSDP buckets
MANY_COLLECTIVES = 50


def collective_names(k: pd.DataFrame) -> np.ndarray:
    """The collective of each comm kernel: the 'Collective name' arg, else parsed from the kernel name."""
    out = []
    for coll, name in zip(k["collective"].to_numpy(), k["name"].astype(str).to_numpy()):
        if isinstance(coll, str) and coll:
            out.append(_CANON.get(coll.lower(), coll.lower()))
            continue
        m = _KERNEL_COLL.search(name)
        g = m.group(1).lower() if m else ""
        if not g or g == "generic":
            low = name.lower()
            g = next((c for c in ("all_reduce", "allreduce", "all_gather", "reduce_scatter", "all_to_all")
                      if c in low), "cross_device_reduce" if "cross_device_reduce" in low else "unknown")
        out.append(_CANON.get(g, g))
    return np.array(out, dtype=object)


@dataclass(frozen=True)
class ExposedCommunication(Detector):
    """
    What it detects
        Time in the analysed steps when an NCCL/RCCL collective kernel (all-reduce, all-gather,
        reduce-scatter, broadcast, all-to-all, send/recv) runs on the GPU and no compute kernel
        does: the timeline's "comm" part. Evidence: collective kernels per step by collective
        (the kernel's `Collective name` arg, else its name), total collective kernel time, the
        overlapped share (HTA's comm/comp overlap: compute during communication / communication
        time), exposed time per step, and an upper bound on the achieved bandwidth of the
        collectives when their element counts are recorded.

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

        If the collectives are waiting rather than moving data, find the slow rank first: analyse
        every rank's trace (`traceinspect DIR`) and compare step times; fix its data loading,
        batch imbalance or host contention.

    False positives
        A single-GPU trace has no collectives and is skipped. The first steps after start-up
        include NCCL communicator setup; analyse steady-state steps. A rank that waits is not the
        slow one: the exposed time on this rank can be caused by another rank.

    References
        HTA comm/comp overlap and temporal breakdown docs; TensorBoard profiler plugin's
        communication rule (> 10% of the step); PyTorch DDP notes (bucket_cap_mb,
        gradient_as_bucket_view, no_sync); FSDP docs (forward_prefetch, limit_all_gathers);
        NVIDIA/nccl#739 (kernel names do not tell the operation).
    """

    code = "TI203"
    name = "exposed-communication"
    summary = "NCCL/RCCL collective time not overlapped with compute"
    fires_on = ("builders_transfer.build_exposed_nccl", "builders_transfer.build_straggler_nccl")
    silent_on = ("builders.build_healthy", "builders_transfer.build_overlapped_nccl",
                 "builders_transfer.build_cpu_offload")

    min_frac: float = option(0.05, "minimum share of the step time with communication exposed (half the TB "
                                   "plugin's 10% communication rule, since only the exposed part is counted)")
    wait_bw_gbps: float = option(5.0, "collectives achieving at most this bandwidth (GB/s, upper bound) on one "
                                      "node are waiting for other ranks rather than moving data")
    min_wait_kernel_us: float = option(1000.0, "only collective kernels at least this long are used for the "
                                               "bandwidth bound")

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        k = trace.kernels
        tl = trace.timeline
        if tl.device is not None and len(k):
            k = k[k["device"] == tl.device]
        st = trace.steps
        steps_set = iv.union(st["start_us"], st["end_us"])
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
            yield self.declined(f"collectives present, {100 * frac:.1f}% of the window not overlapped with compute, "
                                f"below the {100 * self.min_frac:g}% threshold")
            return
        n = max(ctx.n_steps, 1)
        w = window_label(trace)
        overlap = 1.0 - exposed / comm_us if comm_us > 0 else 0.0
        per_step = tl.per_step["comm_us"].to_numpy()
        share = per_step / tl.per_step["dur_us"].to_numpy()
        colls = collective_names(comm)
        ev = [
            Evidence(label="exposed communication (no compute kernel running)", value=round(exposed / n / 1e3, 2),
                     unit="ms/step", window=w),
            Evidence(label="share of step time (min..max per step)",
                     value=f"{100 * share.min():.1f}..{100 * share.max():.1f}", unit="%", window=w),
            Evidence(label="collective kernel time", value=round(comm_us / n / 1e3, 2), unit="ms/step", window=w),
            Evidence(label="overlapped with compute (HTA comm/comp overlap)", value=round(100 * overlap, 1),
                     unit="%", window=w),
        ]
        g = pd.DataFrame({"coll": colls, "dur": comm["dur_us"].to_numpy()}).groupby("coll")["dur"].agg(["count", "sum"])
        g = g.sort_values("sum", ascending=False)
        for coll, r in g.iterrows():
            ev.append(Evidence(label="collective kernels without a Collective name" if coll == "unknown"
                               else f"{coll} kernels", value=f"{r['count'] / n:.1f}/step, {r['sum'] / n / 1e3:.2f} ms/step",
                               unit="", window=w))
        longest = comm.loc[comm["dur_us"].idxmax()]
        med_step = float(np.median(st["dur_us"].to_numpy()))
        ev.append(Evidence(label="longest collective kernel", value=round(float(longest["dur_us"]) / 1e3, 2),
                           unit=f"ms ({pct(float(longest['dur_us']) / med_step)} of the median step)"))
        bw = self._bandwidth_bound(trace, comm)
        waiting = False
        if bw is not None:
            ev.append(Evidence(label=f"collective bandwidth, upper bound at {MAX_ELEM_BYTES} B/element "
                                     f"(kernels >= {fmt_us(self.min_wait_kernel_us)})",
                               value=round(bw, 2), unit="GB/s", window=w))
            waiting = bw <= self.wait_bw_gbps and _single_node(trace)
        if trace.meta.world_size:
            ev.append(Evidence(label="ranks (world size)", value=int(trace.meta.world_size), unit=""))
        known = [c for c in g.index if c != "unknown"]
        top = str(known[0]) if known else "NCCL/RCCL"
        title = (f"{fmt_us(exposed / n)} per step ({pct(frac)}) of {top} communication is not overlapped with compute"
                 f" ({pct(overlap)} overlapped)")
        if waiting:
            title += f"; collectives move at most {bw:.1f} GB/s, so they mostly wait for a slower rank"
        yield self.finding(ctx, title=title, time_lost_us=exposed,
                           confidence="high" if frac >= 0.15 else "medium", evidence=ev,
                           fix=_fix(ctx.framework, set(g.index), waiting, len(comm) / n), upper_bound=True,
                           events=events_from(comm, trace, "kernel", 3))

    def _bandwidth_bound(self, trace, comm: pd.DataFrame) -> float | None:
        """numel * 4 B / duration over the long collective kernels whose launching op recorded its
        input shapes (record_param_comms with record_shapes); None when unknown."""
        ops = trace.cpu_ops
        long = comm[(comm["dur_us"] >= self.min_wait_kernel_us) & (comm["op_idx"] >= 0)]
        if not len(long) or not len(ops):
            return None
        total_b = total_t = 0.0
        for r in long.itertuples(index=False):
            numel = _numel(trace.shapes(ops["input_dims_raw"].iat[int(r.op_idx)]))
            if numel:
                total_b += numel * MAX_ELEM_BYTES
                total_t += float(r.dur_us)
        return total_b / total_t / 1e3 if total_t > 0 else None


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
        parts.append(f"coalesce the {per_step:.0f} collectives per step into a few large ones (bucket the tensors, "
                     "e.g. DDP instead of per-tensor all_reduce, or torch.distributed coalescing)")
    if waiting:
        parts.append("Find the slower rank first: the collectives wait rather than transfer, so compare step times "
                     "across all ranks' traces and fix that rank's data loading or load imbalance")
    if colls & {"allgather", "reduce_scatter"}:
        parts.append("prefetch FSDP all-gathers (fsdp_config forward_prefetch / backward_prefetch='backward_pre', "
                     "limit_all_gathers)" if hf else
                     "prefetch FSDP all-gathers (forward_prefetch=True, backward_prefetch=BACKWARD_PRE, "
                     "limit_all_gathers=True)")
    if colls & {"allreduce", "cross_device_reduce", "unknown", "broadcast", "reduce"} or not parts:
        parts.append("all-reduce less often and overlap it with backward: raise gradient_accumulation_steps and "
                     "tune ddp_bucket_cap_mb (ddp_find_unused_parameters=False)" if hf else
                     "all-reduce less often and overlap it with backward: accumulate gradients under "
                     "model.no_sync(), tune DDP(bucket_cap_mb=..., gradient_as_bucket_view=True)")
    if colls & {"all_to_all", "send/recv"}:
        parts.append("overlap all-to-all/send-recv with compute (pipeline embedding or expert exchanges) or use a "
                     "larger per-GPU batch")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
