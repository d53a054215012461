"""The batch-size memory model: how large a micro-batch fits in device memory, and what states fit.

Owns the arithmetic (a pure function of bytes) and the report's memory section. Must not read
trace tables directly (trace/memory.py does) nor render. `fit_batch` is the one entry point that
every fix growing the batch uses, and the one a what-if engine must call, so a predicted speed-up
and the memory estimate always talk about the same batch size.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import msgspec

from ..sections import BatchFit, Memory, MemoryDevice, MemoryStep, py
from ..trace.memory import memory_profile
from .run import detect_framework, num_parameters  # noqa: F401  (num_parameters: kept importable here)

SAFETY_MARGIN = 0.90  # plan peaks up to 90% of capacity: fragmentation, the CUDA context, NCCL buffers
GB = 1e9
# Bytes per parameter of the training state (weights + grads + optimizer states), by recipe, least
# invasive first: (short name, bytes, what it is). ZeRO paper section 3; bitsandbytes 8-bit optimizers;
# QLoRA paper section 3 (4-bit NF4 base, LoRA adapters of ~1% of the parameters trained with Adam).
STATE_RECIPES = (
    ("as now, without offload", 16.0, "mixed-precision Adam: bf16 weights and grads, fp32 master, fp32 m and v"),
    ("with bf16 states", 8.0, "bf16 weights, grads and Adam states, no fp32 master"),
    ("with 8-bit Adam states", 10.0, "bf16 weights and grads, fp32 master, 8-bit m and v"),
    ("QLoRA (4-bit base, LoRA adapters)", 0.5 + 0.01 * 16.0, "4-bit base weights; adapters of ~1% with Adam"),
)
MIXED_ADAM_BYTES = STATE_RECIPES[0][1]


def predicted_peak(fixed_bytes: float, per_batch_bytes: float, factor: float) -> float:
    """Peak allocated bytes at `factor` x the current batch: activations scale linearly, the rest does not."""
    return fixed_bytes + per_batch_bytes * factor


def fit_batch(
    *,
    peak_bytes: float,
    fixed_bytes: float,
    capacity_bytes: float,
    want_factor: int,
    batch: int | None = None,
    accumulation: int | None = None,
    margin: float = SAFETY_MARGIN,
    measured: tuple[str, ...] = (),
    assumed: tuple[str, ...] = (),
    batch_name: str = "micro-batch",
    accumulation_name: str = "gradient accumulation",
    recommended_by: str | None = None,
) -> BatchFit:
    """The largest growth of the micro-batch, up to `want_factor`, whose predicted peak stays under
    `margin` x capacity; with gradient accumulation the factor divides it so the effective batch holds."""
    per = max(peak_bytes - fixed_bytes, 0.0)
    budget = margin * capacity_bytes - fixed_bytes
    max_factor = budget / per if per > 0 else float(want_factor)
    factor = max(min(int(math.floor(max_factor + 1e-9)), want_factor), 1)
    new_acc = None
    if accumulation:
        # keep the effective batch: the largest growth that divides the accumulation, when one >= 2 fits
        divisors = [d for d in range(2, factor + 1) if accumulation % d == 0]
        factor = max(divisors) if divisors else factor
        new_acc = max(round(accumulation / factor), 1)
    return BatchFit(
        batch=batch * factor if batch else None,
        factor=factor,
        max_factor=round(max_factor, 3),
        accumulation=new_acc,
        current_batch=batch,
        current_accumulation=accumulation,
        fixed_bytes=fixed_bytes,
        per_batch_bytes=per,
        capacity_bytes=capacity_bytes,
        margin_frac=margin,
        predicted_peak_bytes=predicted_peak(fixed_bytes, per, factor),
        measured=list(measured),
        assumed=list(assumed),
        batch_name=batch_name,
        accumulation_name=accumulation_name,
        recommended_by=recommended_by,
    )


def _cfg_int(trace, key: str) -> int | None:
    rc = trace.meta.run_config
    cfg = rc.get("config") if isinstance(rc, dict) else None
    v = cfg.get(key) if isinstance(cfg, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 31 else None


def batch_fit_for(trace, want_factor: int) -> BatchFit | None:
    """fit_batch on this trace's figures (None when the trace has no peak or no capacity)."""
    prof = memory_profile(trace)
    if not prof.source:
        return None
    dev = trace.device_id if trace.device_id in prof.devices else (prof.devices[0] if prof.devices else None)
    if dev is None:
        return None
    peak, cap = prof.peak(dev), prof.capacity_bytes.get(dev)
    if peak is None or not cap:
        return None
    src = (
        "torch.cuda.max_memory_allocated() per step (capture helper)"
        if prof.source == "capture"
        else "'Total Allocated' of the [memory] events"
    )
    measured = [
        f"peak allocated: {src}",
        "device capacity: "
        + (
            "torch.cuda.get_device_properties().total_memory"
            if prof.source == "capture"
            else "deviceProperties totalGlobalMem"
        ),
    ]
    assumed = [
        "activations grow linearly with the micro-batch (same sequence length)",
        f"peaks are planned up to {SAFETY_MARGIN:.0%} of capacity (fragmentation, CUDA context)",
    ]
    fixed = prof.start(dev)
    if fixed is not None:
        measured.append(
            "fixed part: allocated memory at step start (weights; in training also grads and optimizer states)"
        )
    else:
        n = num_parameters(trace)
        if n is None:
            return None
        fixed = min(n * MIXED_ADAM_BYTES, peak)
        assumed.append(f"fixed part: {n} parameters x {MIXED_ADAM_BYTES:g} B ({STATE_RECIPES[0][2]})")
    batch = _cfg_int(trace, "per_device_train_batch_size")
    rc = trace.meta.run_config
    if batch is None and isinstance(rc, dict) and isinstance(rc.get("steps"), list):
        first = next((s for s in rc["steps"] if isinstance(s, dict)), {})
        b = first.get("batch_size")
        batch = b if isinstance(b, int) and not isinstance(b, bool) and 0 < b < 1 << 31 else None
    ga = _cfg_int(trace, "gradient_accumulation_steps")
    if batch is not None:
        measured.append("micro-batch and accumulation: the capture's run configuration")
    return fit_batch(
        peak_bytes=peak,
        fixed_bytes=fixed,
        capacity_bytes=cap,
        want_factor=want_factor,
        batch=batch,
        accumulation=ga,
        measured=list(measured),
        assumed=list(assumed),
    )


def memory_section(trace, recommended: BatchFit | None = None, recommended_by: str | None = None) -> Memory:
    """The report's `memory` section: per device the capacity, peaks, headroom and per-step rows; or
    the reason there is no figure and the capture option that adds it; and the largest batch growth
    that fits, with the growth a fix recommends (`recommended`, sized by `recommended_by`: the same
    BatchFit the fix shows) or none. Empty (Memory()) where there is neither a figure nor a GPU."""
    prof = memory_profile(trace)
    if not prof.source and not trace.has_gpu and not prof.captured:
        return Memory()
    if not prof.source:
        cap = prof.capacity_bytes.get(trace.device_id) if trace.device_id is not None else None
        return Memory(
            source=prof.source,
            margin_frac=SAFETY_MARGIN,
            reason=prof.reason,
            hint=prof.hint,
            devices=[MemoryDevice(device=py(trace.device_id), capacity_bytes=py(cap))] if cap else [],
        )
    devices = [
        MemoryDevice(
            device=py(d),
            capacity_bytes=py(prof.capacity_bytes.get(d)),
            peak_allocated_bytes=py(prof.peak(d, "allocated")),
            peak_reserved_bytes=py(prof.peak(d, "reserved")),
            start_allocated_bytes=py(prof.start(d)),
            headroom_bytes=py(prof.headroom(d)),
            per_step=[
                MemoryStep(
                    step=py(s.step),
                    start_allocated_bytes=py(s.start_allocated_bytes),
                    peak_allocated_bytes=py(s.peak_allocated_bytes),
                    peak_reserved_bytes=py(s.peak_reserved_bytes),
                )
                for s in prof.device_steps(d)
            ],
        )
        for d in prof.devices
    ]
    fit = recommended if recommended is not None else batch_fit_for(trace, 1)
    if fit is not None:
        hf = detect_framework(trace) in ("hf_trainer", "trl")
        fit = msgspec.structs.replace(
            fit,
            recommended_by=recommended_by if recommended is not None else None,
            batch_name="per_device_train_batch_size" if hf else "micro-batch",
            accumulation_name="gradient_accumulation_steps" if hf else "gradient accumulation",
        )
    return Memory(
        source=prof.source,
        margin_frac=SAFETY_MARGIN,
        devices=devices,
        **({"batch_fit": fit} if fit is not None else {}),
    )


def gb(v) -> str:
    return f"{v / GB:.1f} GB" if isinstance(v, numbers.Real) else "unknown"


@dataclass(frozen=True)
class StateOption:
    """One way to hold the training state on the device, and whether it fits under the margin."""

    recipe: str
    bytes_per_param: float
    footprint_bytes: float  # state + the measured activations (when known)
    fits: bool


def state_options(
    n_params: float, capacity_bytes: float | None, activation_bytes: float = 0.0, margin: float = SAFETY_MARGIN
) -> list[StateOption]:
    """The training-state recipes of STATE_RECIPES, least invasive first, with their footprint."""
    out = []
    for recipe, bpp, _ in STATE_RECIPES:
        foot = n_params * bpp + activation_bytes
        out.append(StateOption(recipe, bpp, foot, bool(capacity_bytes) and foot <= margin * capacity_bytes))
    return out


def gpus_needed(footprint_bytes: float, capacity_bytes: float, margin: float = SAFETY_MARGIN) -> int:
    """Devices of this capacity that hold `footprint_bytes` sharded evenly (ZeRO-3 / FSDP full sharding)."""
    return max(int(math.ceil(footprint_bytes / (margin * capacity_bytes))), 1)
