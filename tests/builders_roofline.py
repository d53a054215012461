"""Synthetic traces for the efficiency table and far-from-roofline: ops with shapes whose FLOPs and bytes
the tests derive by hand from the constants below.

Every step ends with a device synchronise so the GPU work of a step lies inside its ProfilerStep span.
"""

from __future__ import annotations

from builders import GEMM_BF16, TraceBuilder

STEPS = 3
BF16 = "c10::BFloat16"
BMM_KERNEL = "Cijk_Alik_Bljk_BBS_BH_MT32x32x16_MI16x16x8x1_SN_1LDSB0_APM1_ABV0"

# A large bf16 GEMM: aten::addmm(bias [N], A [M, K], B [K, N])
MM_M, MM_N, MM_K = 8192, 4096, 4096
BIG_GEMM_US = 400.0  # 274.9 GFLOP in 400 us = 687 TFLOP/s: 69% of the H100's 989.4 (compute-bound)

# The tiny batched matmul of the MI300X TimeSformer trace: aten::bmm([B, 8, 64], [B, 64, 8])
TB_B, TB_M, TB_K, TB_N = 37_632, 8, 64, 8
TINY_BMM_US = 1_140.0  # per call, as on the MI300X trace (13.7 ms / 12 calls)
LAYERS = 12


def _big_gemm(t: TraceBuilder, us: float = BIG_GEMM_US) -> None:
    t.op(
        "aten::addmm",
        kernels=[(GEMM_BF16, us)],
        cpu_us=15,
        input_dims=[[MM_N], [MM_M, MM_K], [MM_K, MM_N], [], []],
        input_type=[BF16, BF16, BF16, "Scalar", "Scalar"],
    )


def build_big_gemm(gpu: str = "H100") -> TraceBuilder:
    """Well-shaped bf16 GEMMs at 69% of the H100's peak: far from nothing."""
    t = TraceBuilder(gpu)
    for _ in range(STEPS):
        with t.step(wait_gpu=True):
            for _ in range(LAYERS):
                _big_gemm(t)
    return t


def build_tiny_bmm(gpu: str = "MI300X") -> TraceBuilder:
    """Each layer: one big GEMM and one batched matmul of 37,632 8x64 @ 64x8 matrices at 1.14 ms."""
    t = TraceBuilder(gpu, rocm=gpu.startswith("MI"))
    for _ in range(STEPS):
        with t.step(wait_gpu=True):
            for _ in range(LAYERS):
                _big_gemm(t)
                t.op(
                    "aten::bmm",
                    kernels=[(BMM_KERNEL, TINY_BMM_US)],
                    cpu_us=15,
                    input_dims=[[TB_B, TB_M, TB_K], [TB_B, TB_K, TB_N]],
                    input_type=[BF16, BF16],
                )
    return t
