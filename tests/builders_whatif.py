"""Builders for the what-if replay: each comes in a before and an after form, so the step time a fix
should give is known by construction (the after trace is built, not guessed)."""

from __future__ import annotations

from builders import ELEMENTWISE, GEMM_BF16, GEMM_FP32_SIMT, TraceBuilder

STEPS = 4


def build_stall_and_host_bound(
    load_us: float = 5000.0, cpu_us: float = 900.0, kernel_us: float = 400.0, steps: int = STEPS
) -> TraceBuilder:
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
                t.op(
                    "aten::mm",
                    kernels=[(GEMM_FP32_SIMT, kernel_us)],
                    cpu_us=10,
                    input_dims=[[2048, 2048], [2048, 2048]],
                    input_type=["float", "float"],
                )
    return t


def build_stream_wait(first_us: float = 3000.0, steps: int = STEPS) -> TraceBuilder:
    """Two streams: a kernel of first_us on stream 7, then one on stream 8 launched right away that waits
    for it (cudaStreamWaitEvent), then a sync."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.op("aten::mm", kernels=[(GEMM_BF16, first_us)], stream=7)
            t.stream_free[8] = max(t.stream_free.get(8, 0.0), t.stream_free[7])  # the event wait
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


# --- the cpu-offload, pageable-memcpy, exposed-communication and allocator-churn fixes ------------------
# Each comes with its fixed form: the same loop built with the fix, so the replay of the fix on the first
# has a known answer.


def build_offload_loop(offload: bool = True, steps: int = 3):
    """ZeRO-Offload on an H100 (builders_transfer.build_cpu_offload's loop): 12 + 12 bf16 GEMMs of 2 ms,
    16 x 64 MiB gradient chunks device-to-host, DeepSpeedCPUAdam 100 ms on the host, 16 x 64 MiB parameter
    chunks back. offload=False: the state on the GPU, one fused Adam kernel after backward that reads and
    writes the mixed-precision Adam state once, 2 x 16 B per parameter at the H100's 3350 GB/s, the
    parameters being the gradient bytes at 2 B each (OFFLOAD_OPT_US)."""
    from builders_transfer import (
        CPU_ADAM_US,
        FUSED_ADAM,
        OFFLOAD_CHUNK,
        OFFLOAD_CHUNKS,
        OFFLOAD_COPY_US,
        TransferBuilder,
        _gemm,
    )

    t = TransferBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            with t.span("aten::to"):
                t.memcpy("HtoD", "Pinned", "Device", nbytes=1 << 20, dur_us=40)  # the input batch
            for _ in range(12):
                _gemm(t, "aten::linear", 2000)
            for _ in range(12):
                _gemm(t, "autograd::engine::evaluate_function: MmBackward0", 2000)
            if not offload:
                t.op("aten::_fused_adam_", kernels=[(FUSED_ADAM, OFFLOAD_OPT_US)])
                continue
            for _ in range(OFFLOAD_CHUNKS):
                with t.span("aten::copy_"):
                    t.memcpy("DtoH", "Device", "Pageable", nbytes=OFFLOAD_CHUNK, dur_us=OFFLOAD_COPY_US)
            with t.span("Optimizer.step#DeepSpeedCPUAdam.step", cat="user_annotation"):
                t.cpu(CPU_ADAM_US)
            for _ in range(OFFLOAD_CHUNKS):
                with t.span("aten::copy_"):
                    t.memcpy("HtoD", "Pageable", "Device", nbytes=OFFLOAD_CHUNK, dur_us=OFFLOAD_COPY_US)
    return t


# 16 x 64 MiB of bf16 gradients = 536.9 M parameters; x 2 x 16 B / 3350 GB/s (H100 SXM HBM3)
OFFLOAD_OPT_US = 16 * (64 << 20) / 2 * 2 * 16 / (3350 * 1e3)

PAGEABLE_BYTES = 20_000_000  # the input batch: 20 MB
PAGEABLE_US = 2000.0  # at 10 GB/s pageable
PINNED_US = PAGEABLE_US * 10 / 50  # at the H100's 50 GB/s practical pinned PCIe (hardware.py)


def build_pageable_input(pinned: bool = False, steps: int = 4) -> TraceBuilder:
    """A training step whose input batch (20 MB) is copied from pageable memory: the host blocks 2 ms in
    the copy, then launches 12 layers. pinned=True: the same copy from pinned memory with
    non_blocking=True at 50 GB/s (400 us): the host goes on launching while it runs."""
    from builders import _healthy_layer

    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            with t.span("aten::to"):
                if pinned:
                    t.memcpy("HtoD", "Pinned", "Device", nbytes=PAGEABLE_BYTES, dur_us=PINNED_US, blocking=False)
                else:
                    t.memcpy("HtoD", "Pageable", "Device", nbytes=PAGEABLE_BYTES, dur_us=PAGEABLE_US)
            for _ in range(12):
                _healthy_layer(t)
    return t


def build_comm_then_compute(overlap: bool = False, steps: int = 3, comm_us: float = 3000.0):
    """A DDP-like rank: 6 GEMMs of 1 ms, an all-reduce of comm_us on the NCCL stream that waits for them,
    then 5 more GEMMs of 1 ms that wait for the all-reduce (exposed), then a final 50 us op that needs it.
    overlap=True: the 5 GEMMs run under the all-reduce; only the final op waits for it."""
    from builders_transfer import TransferBuilder, _gemm

    t = TransferBuilder(rank=0, world_size=8)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            for _ in range(6):
                _gemm(t, "aten::linear", 1000)
            t.wait_stream(20, 7)
            t.collective("allreduce", comm_us)
            if not overlap:
                t.wait_stream(7, 20)
            for _ in range(5):
                _gemm(t, "autograd::engine::evaluate_function: MmBackward0", 1000)
            t.wait_stream(7, 20)
            t.op("aten::add", kernels=[(ELEMENTWISE, 50.0)])
    return t


def build_churn(churn: bool = True, steps: int = 4):
    """builders_host.build_allocator_churn's loop (6 layers, each followed by a cudaFree that drains the
    device then takes 400 us, and a 200 us cudaMalloc); churn=False: the calls only in the first step
    (the caching allocator warm after it)."""
    from builders import _healthy_layer
    from builders_host import HostTraceBuilder

    t = HostTraceBuilder()
    for i in range(steps):
        with t.step(wait_gpu=True):  # the step ends when its GPU work does, so both runs measure it
            for _ in range(6):
                _healthy_layer(t)
                if churn or i == 0:
                    t.blocking_free(400.0)
                    t.malloc(200.0)
    return t


GEMM_M, GEMM_N, GEMM_K = 8192, 2048, 2048  # one bf16 aten::mm per layer
GEMM_FLOPS = 2 * GEMM_M * GEMM_N * GEMM_K


def build_gemm_flops(
    flops_factor: float = 1.0, layers: int = 8, steps: int = STEPS, with_flops: bool = True
) -> TraceBuilder:
    """Per step `layers` bf16 aten::mm ops of [8192, 2048] x [2048, 2048] (record_shapes), each carrying the
    profiler's `flops` arg (with_flops=True) of flops_factor x 2*M*N*K, the GEMM's true FLOPs."""
    t = TraceBuilder()
    if with_flops:
        t.meta["with_flops"] = 1
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(layers):
                t.op(
                    "aten::mm",
                    kernels=[(GEMM_BF16, 800.0)],
                    cpu_us=15,
                    input_dims=[[GEMM_M, GEMM_K], [GEMM_K, GEMM_N]],
                    input_type=["c10::BFloat16"] * 2,
                    args={"flops": int(flops_factor * GEMM_FLOPS)} if with_flops else None,
                )
    return t


# --- eager-attention, padding-waste, launch-bound (larger batch), unfused-optimizer -----------------------


def build_attention_host_work(eager: bool = True, cpu_us: float = 1000.0, steps: int = STEPS) -> TraceBuilder:
    """Each layer: cpu_us of host work, then attention between two 300 us projections. eager=True: the
    builders_compute eager chain (bmm 200, scale 50, softmax 400, dropout 100, bmm 200 us, five launches);
    eager=False, the fixed run: one fused kernel of 0.5 x the 400 us of bmm time (the detector's model),
    one launch behind one op's host time. Eager, the GPU sets the pace (1550 us of GPU per layer against
    about 1105 us of host); fused, the host does (800 us of GPU against about 1045 us)."""
    from builders import FLASH_FWD
    from builders_compute import ATT_B, ATT_H, ATT_L, ATT_D, ATT_LAYERS, BMM_US, QKV_US, _eager_layer

    t = TraceBuilder("H100")
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(ATT_LAYERS):
                t.cpu(cpu_us)
                if eager:
                    _eager_layer(t)
                    continue
                t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)])
                with t.span(
                    "aten::scaled_dot_product_attention",
                    args={"Input Dims": [[ATT_B, ATT_H, ATT_L, ATT_D]] * 3 + [[], [], []]},
                ):
                    t.op("aten::_flash_attention_forward", kernels=[(FLASH_FWD, 0.5 * 2 * BMM_US)])
                t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)])
    return t


def build_padded_host_work(
    ratio: float = 1.0, real_frac: float = 0.375, cpu_us: float = 400.0, steps: int = STEPS
) -> TraceBuilder:
    """Eight layers of a 600 us linear and a 300 us attention kernel (token-proportional) behind cpu_us
    of host work each, then an optimizer step of one 800 us kernel (not token-proportional). The capture
    metadata says real_frac of the tokens are real. ratio scales the token-proportional kernels: the fixed
    (packed) run is ratio=real_frac with real_frac=1. Padded, the GPU sets the pace (900 us per layer
    against about 430 us of host); packed, the host does (337.5 us against 430 us)."""
    from builders import FLASH_FWD
    from builders_compute import _run_config

    t = TraceBuilder("H100")
    meta = []
    for _ in range(steps):
        meta.append(
            {
                "step": t.step_no,
                "batch_size": 8,
                "seq_len": 512,
                "real_tokens": int(4096 * real_frac),
                "padded_tokens": 4096,
            }
        )
        with t.step(wait_gpu=True):
            for _ in range(8):
                t.cpu(cpu_us)
                t.op("aten::linear", kernels=[(GEMM_BF16, 600.0 * ratio)])
                t.op("aten::_flash_attention_forward", kernels=[(FLASH_FWD, 300.0 * ratio)])
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                t.op("aten::_fused_adamw_", kernels=[(GEMM_BF16, 800.0)])
    t.meta["traceinspect"] = _run_config(meta)
    return t


def build_small_batch(
    batch: int = 1,
    kernels: int = 400,
    fixed_us: float = 2.0,
    per_sample_us: float = 6.0,
    steps: int = 3,
    wait_gpu: bool = False,
) -> TraceBuilder:
    """A launch-bound loop: `kernels` launches per step, each behind 20 us of host dispatch (+5 us launch),
    each kernel fixed_us + batch x per_sample_us long. batch=1: 8 us kernels every 25 us, the GPU busy
    about a third of the time (the detector recommends 2x). The fixed run is batch=2: the same host work
    per step, 14 us kernels, so per original batch half the step."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=wait_gpu):  # wait_gpu: each step ends with a device sync
            for _ in range(kernels):
                t.op("aten::add", kernels=[(ELEMENTWISE, fixed_us + batch * per_sample_us)], cpu_us=20)
    return t


def build_optimizer(fused: bool = False, params: int = 200, steps: int = STEPS) -> TraceBuilder:
    """Forward/backward (GPU-bound), then the optimizer step. fused=False: builders_host's for-loop AdamW,
    three 2.5 us kernels per parameter, each behind 15 us of host time. fused=True, the fixed run: one
    aten::_fused_adamw_ launching 4 kernels that keep the work above 2 us per kernel:
    (3 x params x 0.5 + 4 x 2) / 4 us each."""
    from builders_host import (
        ADD_KERNEL,
        ADDCDIV_KERNEL,
        FUSED_ADAMW_KERNEL,
        MUL_KERNEL,
        OPT_CPU_US,
        OPT_KERNEL_US,
        _optimizer_prologue,
    )

    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _optimizer_prologue(t, 6)
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                if fused:
                    each = (3 * params * (OPT_KERNEL_US - 2.0) + 4 * 2.0) / 4
                    t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAMW_KERNEL, each)] * 4, cpu_us=OPT_CPU_US)
                    continue
                for _ in range(params):
                    t.op("aten::mul_", kernels=[(MUL_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
                    t.op("aten::add_", kernels=[(ADD_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
                    t.op("aten::addcdiv_", kernels=[(ADDCDIV_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
    return t


def build_uneven_host(loads=(13800.0, 5800.0), kernel_us: float = 1000.0, backlog_us: float = 0.0, steps: int = 6):
    """No sync: the DataLoader holds the host loads[j % 2] per step (steps alternate 14 and 6 ms), then ten
    kernel_us kernels (10 ms of GPU work per step), then, where backlog_us > 0, two backlog_us kernels
    whose launches were not recorded. The GPU trails the host in the short steps and catches up in the
    long ones, so the measured median step (10 ms) is the GPU work, not the per-step max(host, GPU)."""
    from builders_quality import QualityBuilder

    t = QualityBuilder()
    for j in range(steps):
        with t.step():
            t.dataloader(loads[j % len(loads)])
            for _ in range(10):
                t.op("aten::mm", kernels=[(GEMM_BF16, kernel_us)], cpu_us=10)
            for _ in range(2 if backlog_us > 0 else 0):
                t.unlaunched_kernel(GEMM_BF16, backlog_us)
    return t
