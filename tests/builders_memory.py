"""Builders with `[memory]` instant events, shaped as Kineto writes them with profile_memory=True.

Kineto (PyTorch >= 1.10) writes one instant per allocator call:
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid", "tid", "ts",
     "args": {"Total Reserved", "Total Allocated", "Bytes", "Addr", "Device Id", "Device Type"}}
`Bytes` is negative for a free; the totals are the allocator's counters after the call; Device Type 0
is the CPU (Device Id -1), 1 is CUDA (also on ROCm builds). See SIGNATURES.md section 1.2.
"""

from __future__ import annotations

from builders import ELEMENTWISE, PID, TID, TraceBuilder
from builders_host import HostTraceBuilder

GiB = 1 << 30


class MemoryTraceBuilder(HostTraceBuilder):
    """TraceBuilder + allocator events: the running totals are kept by the builder, as the allocator does."""

    def __init__(self, *args, fixed_bytes: float = 0, reserved_extra: float = 0, **kw):
        super().__init__(*args, **kw)
        self.allocated = float(fixed_bytes)  # weights, grads, optimizer states: allocated before the window
        self.reserved_extra = float(reserved_extra)
        self.addr = 0x7F0000000000

    def mem(self, nbytes: float, *, device: int = 0, device_type: int = 1) -> "MemoryTraceBuilder":
        """One allocation (nbytes > 0) or free (nbytes < 0) on the device, at the host clock."""
        if device_type != 0:
            self.allocated += nbytes
        self.addr += 512
        self.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": self.now,
                "args": {
                    "Total Reserved": int(self.allocated + self.reserved_extra) if device_type else 0,
                    "Total Allocated": int(self.allocated) if device_type else int(abs(nbytes)),
                    "Bytes": int(nbytes),
                    "Addr": self.addr,
                    "Device Id": device if device_type else -1,
                    "Device Type": device_type,
                },
            }
        )
        self.now += 0.5
        return self


def build_launch_bound_memory(
    steps: int = 3,
    kernels_per_step: int = 400,
    *,
    fixed_bytes: float = 60e9,
    act_bytes: float = 4e9,
    chunks: int = 4,
    batch: int = 1,
    accumulation: int = 16,
    gpu: str = "H100",
    kernel_us: float = 3.0,
) -> MemoryTraceBuilder:
    """builders_host.build_launch_bound_hf with profile_memory=True (`kernel_us` kernels): `fixed_bytes` allocated before the
    window (weights + grads + states), each step allocates `act_bytes` of activations in `chunks`
    pieces during the forward, and frees them in the backward; a small CPU allocation per step."""
    t = MemoryTraceBuilder(gpu, fixed_bytes=fixed_bytes, reserved_extra=1e9)
    t.run_config(per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation)
    t.meta["profile_memory"] = 1
    per = kernels_per_step // (2 * chunks)
    for _ in range(steps):
        with t.step():
            t.mem(4096, device_type=0)
            for _ in range(chunks):  # forward: activations pile up
                t.mem(act_bytes / chunks)
                for _ in range(per):
                    t.op("aten::add", kernels=[(ELEMENTWISE, kernel_us)], cpu_us=20)
            for _ in range(chunks):  # backward: they are freed
                for _ in range(per):
                    t.op("aten::add", kernels=[(ELEMENTWISE, kernel_us)], cpu_us=20)
                t.mem(-act_bytes / chunks)
    return t


def build_launch_bound_no_memory() -> TraceBuilder:
    """builders_host.build_launch_bound_hf: captured without profile_memory."""
    from builders_host import build_launch_bound_hf

    return build_launch_bound_hf()
