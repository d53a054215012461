"""Builders for the what-if replay: each comes in a before and an after form, so the step time a fix
should give is known by construction (the after trace is built, not guessed)."""
from __future__ import annotations

from builders import GEMM_BF16, GEMM_FP32_SIMT, TraceBuilder

STEPS = 4


def build_stall_and_host_bound(load_us: float = 5000.0, cpu_us: float = 900.0, kernel_us: float = 400.0,
                               steps: int = STEPS) -> TraceBuilder:
    """Each step: the DataLoader holds the host load_us, then 20 launches each behind cpu_us of other host
    work (kernel_us of GPU each, so the GPU idles cpu_us + 10 + 5 - kernel_us between kernels), then a
    device sync. The fixed run is the same loop with load_us=100 (prefetched) and cpu_us=0."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(load_us)
            for _ in range(20):
                t.cpu(cpu_us)
                t.op("aten::mm", kernels=[(GEMM_BF16, kernel_us)], cpu_us=10)
    return t


def build_host_bound_fp32(kernel_us: float = 400.0, steps: int = STEPS) -> TraceBuilder:
    """Host-bound loop of fp32 (SIMT) GEMMs: 900 us of host work before each 400 us kernel. Tensor cores
    would make the kernels faster, but the host sets the pace: the step barely changes."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(20):
                t.cpu(900)
                t.op("aten::mm", kernels=[(GEMM_FP32_SIMT, kernel_us)], cpu_us=10,
                     input_dims=[[2048, 2048], [2048, 2048]], input_type=["float", "float"])
    return t


def build_stream_wait(first_us: float = 3000.0, steps: int = STEPS) -> TraceBuilder:
    """Two streams: a kernel of first_us on stream 7, then one on stream 8 launched right away that waits
    for it (cudaStreamWaitEvent), then a sync."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.op("aten::mm", kernels=[(GEMM_BF16, first_us)], stream=7)
            t.stream_free[8] = max(t.stream_free.get(8, 0.0), t.stream_free[7])   # the event wait
            t.op("aten::add", kernels=[(GEMM_BF16, 500.0)], stream=8)
    return t


def build_item_syncs(item: bool = True, steps: int = STEPS) -> TraceBuilder:
    """Ten 500 us kernels per step, each followed by `.item()` (a sync) when item=True, 200 us of host work
    after each, and a device sync at the end of the step."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(10):
                t.op("aten::mm", kernels=[(GEMM_BF16, 500.0)])
                if item:
                    t.item()
                t.cpu(200)
    return t
