"""Device memory per step: peaks from `[memory]` events or the capture helpers, capacity, headroom.

Owns reading memory figures out of a Trace (trace tables, deviceProperties, the "traceinspect"
capture block). Must not size batches (facts/memory_fit.py does) nor render anything.
Every capture value is untrusted: a malformed one is ignored, never raised on.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU; CUDA is 1 (ROCm builds also write 1)
NO_MEMORY_HINT = (
    "capture with torch.profiler.profile(profile_memory=True), or with traceinspect.capture, "
    "which records each step's peak on a GPU (docs/memory.md)"
)


@dataclass(frozen=True)
class StepMemory:
    """One device's memory during one step. Bytes; None when unknown."""

    step: int
    device: int
    start_allocated_bytes: float | None  # allocated when the step began (weights, grads, optimizer states, ...)
    peak_allocated_bytes: float | None
    peak_reserved_bytes: float | None

    @property
    def rise_bytes(self) -> float | None:
        """Allocated at the peak minus at the start: what the step itself allocates (activations)."""
        if self.start_allocated_bytes is None or self.peak_allocated_bytes is None:
            return None
        return max(self.peak_allocated_bytes - self.start_allocated_bytes, 0.0)


@dataclass(frozen=True)
class MemoryProfile:
    """What the trace says about device memory. `source` is "capture", "trace" or "" (no figure)."""

    source: str
    steps: tuple[StepMemory, ...] = ()
    capacity_bytes: dict[int, float] = field(default_factory=dict)  # device -> total memory
    reason: str = ""  # why there is no figure (source == "")
    hint: str = ""  # the capture option that adds it
    captured: bool = False  # the trace carries the capture helpers' memory block (even if null)

    @property
    def devices(self) -> list[int]:
        return sorted({s.device for s in self.steps})

    def device_steps(self, device: int) -> list[StepMemory]:
        return [s for s in self.steps if s.device == device]

    def peak(self, device: int, what: str = "allocated") -> float | None:
        vals = [getattr(s, f"peak_{what}_bytes") for s in self.device_steps(device)]
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else None

    def start(self, device: int) -> float | None:
        """The largest step-start allocation: the part of the peak that does not scale with the batch."""
        vals = [s.start_allocated_bytes for s in self.device_steps(device) if s.start_allocated_bytes is not None]
        return max(vals) if vals else None

    def headroom(self, device: int) -> float | None:
        """Capacity minus the peak reserved (else allocated) bytes: what the allocator could still take."""
        cap = self.capacity_bytes.get(device)
        peak = self.peak(device, "reserved") or self.peak(device, "allocated")
        return None if cap is None or peak is None else cap - peak


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    v = float(v)
    return v if math.isfinite(v) and 0 <= v < 2**62 else None


def _capacities(trace) -> dict[int, float]:
    out = {}
    for d in trace.meta.devices:
        cap = _num(d.total_mem_bytes)
        if cap:
            out[int(d.id)] = cap
    return out


def from_capture(trace) -> MemoryProfile | None:
    """The capture helpers' per-step torch.cuda.max_memory_* figures, when the block has them."""
    rc = trace.meta.run_config
    mem = rc.get("memory") if isinstance(rc, dict) else None
    if not isinstance(mem, dict):
        return None
    dev = mem.get("device_index")
    dev = int(dev) if isinstance(dev, int) and not isinstance(dev, bool) and 0 <= dev < 1 << 16 else 0
    caps = _capacities(trace)
    total = _num(mem.get("device_total_bytes"))
    if total:
        caps[dev] = total
    rows = []
    for s in mem.get("steps") if isinstance(mem.get("steps"), list) else ():
        if not isinstance(s, dict) or not isinstance(s.get("step"), int) or isinstance(s.get("step"), bool):
            continue
        row = StepMemory(
            step=s["step"],
            device=dev,
            start_allocated_bytes=_num(s.get("start_allocated_bytes")),
            peak_allocated_bytes=_num(s.get("max_allocated_bytes")),
            peak_reserved_bytes=_num(s.get("max_reserved_bytes")),
        )
        if row.peak_allocated_bytes is not None:
            rows.append(row)
    if not rows:
        return None
    return MemoryProfile(source="capture", steps=tuple(rows), capacity_bytes=caps)


def from_events(trace) -> MemoryProfile:
    """Per device and step: the allocator totals that Kineto writes on every `[memory]` event."""
    caps = _capacities(trace)
    m = trace.memory
    why_off = (
        "the trace has no [memory] events: it was captured without profile_memory=True"
        if not trace.meta.profiler.get("profile_memory")
        else "the trace has no device [memory] events in the analysed steps"
    )
    if not len(m):
        return MemoryProfile(source="", capacity_bytes=caps, reason=why_off, hint=NO_MEMORY_HINT)
    dtype = m["device_type"].to_numpy()
    dev_rows = m[(dtype != CPU_DEVICE_TYPE) & (dtype >= 0)]
    if not len(dev_rows):
        return MemoryProfile(
            source="",
            capacity_bytes=caps,
            hint="profile with the CUDA activity (ProfilerActivity.CUDA), or use traceinspect.capture "
            "on the GPU, which records each step's peak",
            reason="the [memory] events are all host (CPU) allocations: no device memory figure",
        )
    talloc = dev_rows["total_allocated_bytes"].to_numpy()
    tres = dev_rows["total_reserved_bytes"].to_numpy()
    if not (talloc > 0).any():
        # PyTorch before ~1.10 wrote only "Bytes" per event, no running totals: the peak is unknowable
        return MemoryProfile(
            source="",
            capacity_bytes=caps,
            hint="capture with PyTorch 1.10 or newer",
            reason="the [memory] events carry no 'Total Allocated' (an older PyTorch): "
            "the allocation before the window is unknown, so there is no peak",
        )
    order = np.argsort(dev_rows["ts_us"].to_numpy(), kind="stable")
    ts = dev_rows["ts_us"].to_numpy()[order]
    talloc, tres = talloc[order], tres[order]
    nbytes = dev_rows["alloc_bytes"].to_numpy()[order]
    devid = dev_rows["device_id"].to_numpy()[order]
    # a device event without "Device Id" (older Kineto) belongs to the GPU this process drives
    devid = np.where(devid < 0, trace.device_id if trace.device_id is not None else 0, devid)
    steps = trace.steps
    rows = []
    for d in sorted({int(x) for x in devid}):
        sel = devid == d
        t_d, a_d, r_d, b_d = ts[sel], talloc[sel], tres[sel], nbytes[sel]
        for st in steps.itertuples(index=False):
            lo = int(np.searchsorted(t_d, st.start_us, side="left"))
            hi = int(np.searchsorted(t_d, st.end_us, side="right"))
            if hi <= lo:
                continue
            # the total just before the step, else the first event's total minus its own delta
            start = a_d[lo - 1] if lo > 0 else max(a_d[lo] - b_d[lo], 0.0)
            rows.append(
                StepMemory(
                    step=int(st.step),
                    device=d,
                    start_allocated_bytes=float(start),
                    peak_allocated_bytes=float(max(a_d[lo:hi].max(), start)),
                    peak_reserved_bytes=float(r_d[lo:hi].max()) if (r_d[lo:hi] > 0).any() else None,
                )
            )
    if not rows:
        return MemoryProfile(
            source="",
            capacity_bytes=caps,
            hint=NO_MEMORY_HINT,
            reason="no device [memory] event falls inside the analysed steps",
        )
    return MemoryProfile(source="trace", steps=tuple(rows), capacity_bytes=caps)


def memory_profile(trace) -> MemoryProfile:
    """The capture helpers' figures when the trace has them (they see the whole step, including
    allocations outside the profiled ops), else the `[memory]` events'. Memoised per trace."""

    def compute():
        prof = from_capture(trace) or from_events(trace)
        rc = trace.meta.run_config
        mem = rc.get("memory") if isinstance(rc, dict) else None
        why = mem.get("reason") if isinstance(mem, dict) else None
        if not prof.source and isinstance(why, str) and why:  # e.g. a CPU capture: say what the helper said
            prof = MemoryProfile(
                source="",
                capacity_bytes=prof.capacity_bytes,
                reason=f"capture helper: {why[:200]}",
                hint=prof.hint,
                captured=True,
            )
        return prof

    return trace.memo(("memory profile", tuple(trace.steps["step"])), compute)
