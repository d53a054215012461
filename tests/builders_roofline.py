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


# --- issue 32 item 1: the convolutions of PyTorch <= 1.10 (cuDNN's own backward ops) --------------------
# layer A: x [32, 64, 56, 56] * w [128, 64, 3, 3], stride 2 -> [32, 128, 28, 28]; its parent
# cudnn_convolution_backward(self, grad_output, weight) carries all three sizes
# layer B: x [32, 128, 28, 28] * w [256, 128, 1, 1] -> [32, 256, 28, 28], no parent backward op: the
# forward (x, w), grad_input (go, w) and grad_weight (go, x) calls are joined on what they share
CONV_A = ([32, 64, 56, 56], [128, 64, 3, 3], [32, 128, 28, 28])
CONV_B = ([32, 128, 28, 28], [256, 128, 1, 1], [32, 256, 28, 28])
CONV_US = {"fwd": 500.0, "bwd_input": 600.0, "bwd_weight": 700.0}
CLAMP_US = 50.0
CUDNN_KERNEL = "volta_scudnn_128x64_relu_interior_nn_v1"
F32 = "float"
_LISTS = ["GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"]


def _cudnn_layer(t: TraceBuilder, x, w, go, parent: bool) -> None:
    t.op(
        "aten::cudnn_convolution",
        kernels=[(CUDNN_KERNEL, CONV_US["fwd"])],
        input_dims=[x, w, [], [], [], [], [], [], []],
        input_type=[F32, F32, *_LISTS],
    )
    t.op(
        "aten::clamp_min",  # relu_ -> clamp_min_ -> clamp_min.out(self, min, out=self)
        kernels=[("void at::native::vectorized_elementwise_kernel<4, clamp_min>", CLAMP_US)],
        input_dims=[go, [], go],
        input_type=[F32, "Int", F32],
    )

    def children():
        t.op(
            "aten::cudnn_convolution_backward_input",
            kernels=[("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>", CONV_US["bwd_input"])],
            input_dims=[[], go, w, [], [], [], [], [], [], []],
            input_type=["GenericList", F32, F32, *_LISTS[:6]],
        )
        t.op(
            "aten::cudnn_convolution_backward_weight",
            kernels=[
                ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>", CONV_US["bwd_weight"])
            ],
            input_dims=[[], go, x, [], [], [], [], [], [], []],
            input_type=["GenericList", F32, F32, *_LISTS[:6]],
        )

    if parent:
        dims = [x, go, w, [], [], [], [], [], [], [], []]
        types = [F32, F32, F32, *_LISTS, "GenericList"]
        with t.span("aten::cudnn_convolution_backward", args={"Input Dims": dims, "Input type": types}):
            children()
    else:
        children()


def build_cudnn_resnet(extra_op_us: float = 0.0) -> TraceBuilder:
    """Two fp32 ResNet layers on a V100 as PyTorch 1.8 records them, with record_shapes; with
    extra_op_us > 0 each step also runs a custom op of that kernel time that the model has no formula for."""
    t = TraceBuilder("V100")
    for _ in range(STEPS):
        with t.step(wait_gpu=True):
            _cudnn_layer(t, *CONV_A, parent=True)
            _cudnn_layer(t, *CONV_B, parent=False)
            if extra_op_us:
                t.op(
                    "myext::fused_block",
                    kernels=[("myext_fused_block_kernel", extra_op_us)],
                    input_dims=[[32, 256, 28, 28]],
                    input_type=[F32],
                )
    return t
