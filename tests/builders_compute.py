"""Synthetic traces for the compute detectors: fp32 GEMMs, eager attention, padding waste.

Every step ends with a device synchronise (step(wait_gpu=True)) so the GPU work of a step lies inside
its ProfilerStep span; the tests derive their expected numbers from the constants below.
"""

from __future__ import annotations

from builders import ELEMENTWISE, FLASH_FWD, GEMM_BF16, TraceBuilder

# --- fp32-gemm ----------------------------------------------------------------------------------------
SGEMM_AMPERE = "ampere_sgemm_128x64_tn"
SGEMM_VOLTA = "volta_sgemm_128x64_nt"
GEMM_TF32 = (
    "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8_"
    "execute_kernel__5x_cublas"
)
GEMM_UNNAMED = "void gemm_kernel_impl<128, 64, 8>(GemmParams)"  # a name that tells no precision
ELEMENTWISE_F32 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
GEMM_STEPS = 4
GEMM_LAYERS = 12
GEMM_US = 1000.0  # one fp32 GEMM kernel
ADD_US = 100.0  # the elementwise kernel after it
PASCAL = {
    "id": 0,
    "name": "Tesla P100-PCIE-16GB",
    "totalGlobalMem": 17_000_000_000,
    "computeMajor": 6,
    "computeMinor": 0,
    "numSms": 56,
}

# --- eager-attention ------------------------------------------------------------------------------------
ATT_STEPS = 3
ATT_LAYERS = 6
ATT_B, ATT_H, ATT_L, ATT_D = 8, 12, 1024, 64
BMM_BF16 = (
    "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1>"
    "(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1::Params)"
)
SOFTMAX_FWD = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
    "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
LOG_SOFTMAX_FWD = (
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>"
    "(float*, float const*, int, int, int, bool const*, int, bool)"
)
DROPOUT = (
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, "
    "bool>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)"
)
MUL_BF16 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int)"
)
QKV_US = 300.0  # the projection GEMMs around attention (not part of it)
BMM_US = 200.0  # each attention bmm (Q.K^T and P.V)
SCALE_US = 50.0  # the scale multiply
SOFTMAX_US = 400.0
DROPOUT_US = 100.0

# --- padding-waste --------------------------------------------------------------------------------------
PAD_STEPS = 4
PAD_LAYERS = 8
PAD_B, PAD_L = 8, 512
PAD_REAL = 1536  # real tokens per step out of PAD_B * PAD_L = 4096
LINEAR_US = 600.0
SDPA_US = 300.0
OPT_US = 800.0  # optimizer kernel: does not scale with tokens
EFFICIENT_FWD = (
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
)
FUSED_ADAMW = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>"
)
VARYING_L = (173, 301, 256, 419)
VARLEN_Q = 2500  # real tokens per step seen by the varlen attention kernel (of PAD_B * PAD_L)


def _gemm_steps(gpu: str, kname: str, in_type: str = "float") -> TraceBuilder:
    t = TraceBuilder(gpu)
    for _ in range(GEMM_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(GEMM_LAYERS):
                t.op(
                    "aten::mm",
                    kernels=[(kname, GEMM_US)],
                    input_dims=[[4096, 4096], [4096, 4096]],
                    input_type=[in_type, in_type],
                )
                t.op(
                    "aten::add",
                    kernels=[(ELEMENTWISE_F32, ADD_US)],
                    input_dims=[[4096, 4096], [4096, 4096], []],
                    input_type=[in_type, in_type, "Scalar"],
                )
    return t


def build_fp32_gemm() -> TraceBuilder:
    """A100 running every matmul as ampere_sgemm (fp32 SIMT) under aten::mm with Input type float."""
    return _gemm_steps("A100", SGEMM_AMPERE)


def build_fp32_gemm_v100() -> TraceBuilder:
    """V100 fp32 training: volta_sgemm (no TF32 on Volta; fp16 tensor cores unused)."""
    return _gemm_steps("V100", SGEMM_VOLTA)


def build_fp32_unknown_name() -> TraceBuilder:
    """A100, GEMM kernels whose name tells no precision: the op's Input type float decides."""
    return _gemm_steps("A100", GEMM_UNNAMED)


def build_bf16_gemm() -> TraceBuilder:
    """H100 bf16 GEMMs (sm90_xmma ... bf16): tensor cores in use."""
    return _gemm_steps("H100", GEMM_BF16, "c10::BFloat16")


def build_tf32_gemm() -> TraceBuilder:
    """A100 fp32 model with allow_tf32: TF32 tensor-core GEMMs are not fp32 SIMT."""
    return _gemm_steps("A100", GEMM_TF32)


def build_fp32_gemm_pascal() -> TraceBuilder:
    """P100 (sm60): fp32 sgemm, but no tensor cores to move to."""
    t = _gemm_steps("A100", "maxwell_sgemm_128x64_nt")
    t.meta["deviceProperties"] = [dict(PASCAL)]
    return t


# --- eager attention ----------------------------------------------------------------------------------


def _eager_layer(t: TraceBuilder, shapes: bool = True) -> None:
    b, h, l, d = ATT_B, ATT_H, ATT_L, ATT_D

    def dims(x):
        return x if shapes else None

    bf = ["c10::BFloat16"] * 2
    t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)], input_dims=dims([[b, l, h * d], [3 * h * d, h * d]]))
    with t.span("aten::matmul", args={"Input Dims": [[b, h, l, d], [b, h, d, l]]} if shapes else None):
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=dims([[b * h, l, d], [b * h, d, l]]), input_type=bf)
    t.op("aten::mul", kernels=[(MUL_BF16, SCALE_US)], input_dims=dims([[b, h, l, l], []]))
    with t.span("aten::softmax"):
        t.op(
            "aten::_softmax",
            kernels=[(SOFTMAX_FWD, SOFTMAX_US)],
            input_dims=dims([[b, h, l, l], [], []]),
            input_type=["c10::BFloat16", "Scalar", "Scalar"],
        )
    with t.span("aten::dropout"):
        t.op("aten::native_dropout", kernels=[(DROPOUT, DROPOUT_US)], input_dims=dims([[b, h, l, l], [], []]))
    with t.span("aten::matmul"):
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=dims([[b * h, l, l], [b * h, l, d]]), input_type=bf)
    t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)], input_dims=dims([[b, l, h * d], [h * d, h * d]]))


def _classifier(t: TraceBuilder, shapes: bool = True) -> None:
    """A classification head: linear -> softmax over [batch, classes], then the log_softmax loss."""
    t.op("aten::linear", kernels=[(GEMM_BF16, 50)], input_dims=[[ATT_B, 768], [1000, 768]] if shapes else None)
    with t.span("aten::softmax"):
        t.op("aten::_softmax", kernels=[(SOFTMAX_FWD, 20)], input_dims=[[ATT_B, 1000], [], []] if shapes else None)
    with t.span("aten::log_softmax"):
        t.op(
            "aten::_log_softmax",
            kernels=[(LOG_SOFTMAX_FWD, 20)],
            input_dims=[[ATT_B, 1000], [], []] if shapes else None,
        )


def build_eager_attention(shapes: bool = True) -> TraceBuilder:
    """H100 bf16 transformer with eager attention: bmm, scale, softmax [B,H,L,L], dropout, bmm per layer."""
    t = TraceBuilder("H100")
    for _ in range(ATT_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(ATT_LAYERS):
                _eager_layer(t, shapes)
            _classifier(t, shapes)
    return t


SOFTMAX_BWD = (
    "void (anonymous namespace)::softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
    "(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, int, int, int, bool const*)"
)


def _eager_layer_backward(t: TraceBuilder) -> None:
    """Autograd of one eager attention layer: BmmBackward0 (dP, dV), dropout and softmax backward, the
    scale's MulBackward0, BmmBackward0 (dQ, dK); each kernel as long as its forward twin."""
    b, h, l, d = ATT_B, ATT_H, ATT_L, ATT_D
    with t.span("autograd::engine::evaluate_function: BmmBackward0"):
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=[[b * h, l, d], [b * h, d, l]])
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=[[b * h, l, l], [b * h, l, d]])
    with t.span("autograd::engine::evaluate_function: NativeDropoutBackward0"):
        t.op(
            "aten::native_dropout_backward",
            kernels=[(MUL_BF16, DROPOUT_US)],
            input_dims=[[b, h, l, l], [b, h, l, l], []],
        )
    with t.span("autograd::engine::evaluate_function: SoftmaxBackward0"):
        t.op(
            "aten::_softmax_backward_data",
            kernels=[(SOFTMAX_BWD, SOFTMAX_US)],
            input_dims=[[b, h, l, l], [b, h, l, l], [], []],
        )
    with t.span("autograd::engine::evaluate_function: MulBackward0"):
        t.op("aten::mul", kernels=[(MUL_BF16, SCALE_US)], input_dims=[[b, h, l, l], []])
    with t.span("autograd::engine::evaluate_function: BmmBackward0"):
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=[[b * h, l, l], [b * h, l, d]])
        t.op("aten::bmm", kernels=[(BMM_BF16, BMM_US)], input_dims=[[b * h, d, l], [b * h, l, l]])
    t.op("aten::mm", kernels=[(GEMM_BF16, QKV_US)], input_dims=[[b * l, h * d], [h * d, 3 * h * d]])


def build_eager_attention_training() -> TraceBuilder:
    """Forward and backward of the eager layers: softmax_warp_backward between the BmmBackward0 pairs."""
    t = TraceBuilder("H100")
    for _ in range(ATT_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(ATT_LAYERS):
                _eager_layer(t)
            for _ in range(ATT_LAYERS):
                _eager_layer_backward(t)
    return t


def build_sdpa_math_fallback() -> TraceBuilder:
    """scaled_dot_product_attention that fell back to its math backend: the eager chain under SDPA."""
    t = TraceBuilder("H100")
    for _ in range(ATT_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(ATT_LAYERS):
                with t.span("aten::scaled_dot_product_attention"):
                    with t.span("aten::_scaled_dot_product_attention_math"):
                        _eager_layer(t)
    return t


def build_eager_attention_no_shapes() -> TraceBuilder:
    """The same without record_shapes: only the bmm neighbours of the softmax tell it is attention."""
    return build_eager_attention(shapes=False)


def build_sdpa_flash() -> TraceBuilder:
    """Fused SDPA flash attention and a classifier softmax: nothing eager."""
    t = TraceBuilder("H100")
    for _ in range(ATT_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(ATT_LAYERS):
                t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)])
                with t.span(
                    "aten::scaled_dot_product_attention",
                    args={"Input Dims": [[ATT_B, ATT_H, ATT_L, ATT_D]] * 3 + [[], [], []]},
                ):
                    with t.span("aten::_scaled_dot_product_flash_attention"):
                        t.op("aten::_flash_attention_forward", kernels=[(FLASH_FWD, 500)])
                t.op("aten::linear", kernels=[(GEMM_BF16, QKV_US)])
            _classifier(t)
    return t


def build_classifier_softmax() -> TraceBuilder:
    """An MLP classifier: softmax over [batch, classes] after linear layers, no attention."""
    t = TraceBuilder("H100")
    for _ in range(ATT_STEPS):
        with t.step(wait_gpu=True):
            for _ in range(8):
                t.op("aten::linear", kernels=[(GEMM_BF16, 400)], input_dims=[[ATT_B, 768], [768, 768]])
            for _ in range(4):
                _classifier(t)
    return t


# --- padding waste --------------------------------------------------------------------------------------


def _lm_step(t: TraceBuilder, b: int, l: int, *, mask: bool, varlen_q: int | None = None) -> None:
    t.op(
        "aten::embedding",
        kernels=[(ELEMENTWISE, 20)],
        input_dims=[[32000, 1024], [b, l], [], [], []],
        input_type=["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"],
    )
    for _ in range(PAD_LAYERS):
        t.op("aten::linear", kernels=[(GEMM_BF16, LINEAR_US)], input_dims=[[b, l, 1024], [3072, 1024]])
        if varlen_q is not None:
            t.op(
                "flash_attn::_flash_attn_varlen_forward",
                kernels=[(FLASH_FWD, SDPA_US)],
                input_dims=[[varlen_q, 16, 64], [varlen_q, 16, 64], [varlen_q, 16, 64], [b + 1], [b + 1]],
            )
        else:
            q = [b, 16, l, 64]
            with t.span(
                "aten::scaled_dot_product_attention",
                args={"Input Dims": [q, q, q, [b, 1, l, l] if mask else [], [], [], [], []]},
            ):
                if mask:
                    t.op("aten::_scaled_dot_product_efficient_attention", kernels=[(EFFICIENT_FWD, SDPA_US)])
                else:
                    t.op("aten::_scaled_dot_product_flash_attention", kernels=[(FLASH_FWD, SDPA_US)])
        t.op("aten::linear", kernels=[(GEMM_BF16, LINEAR_US)], input_dims=[[b, l, 1024], [1024, 1024]])
    with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
        t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAMW, OPT_US)])


def _run_config(steps: list[dict] | None, **config) -> dict:
    return {
        "schema_version": 1,
        "source": "hf_trainer",
        "framework": {"torch": "2.5.1", "transformers": "4.46.0"},
        "config": {"per_device_train_batch_size": PAD_B, "packing": None, "padding_free": None, **config},
        "steps": steps or [],
    }


def build_padding_metadata() -> TraceBuilder:
    """HF Trainer run whose capture metadata says PAD_REAL of PAD_B x PAD_L tokens per step are real."""
    t = TraceBuilder("H100")
    steps = []
    for _ in range(PAD_STEPS):
        steps.append(
            {
                "step": t.step_no,
                "batch_size": PAD_B,
                "seq_len": PAD_L,
                "real_tokens": PAD_REAL,
                "padded_tokens": PAD_B * PAD_L,
            }
        )
        with t.step(wait_gpu=True):
            _lm_step(t, PAD_B, PAD_L, mask=True)
    t.meta["traceinspect"] = _run_config(steps, max_seq_length=PAD_L)
    return t


def build_padded_shapes() -> TraceBuilder:
    """No metadata: pad-to-longest (L varies by step) and SDPA gets a [B,1,L,L] mask (efficient backend)."""
    t = TraceBuilder("H100")
    for l in VARYING_L:
        with t.step(wait_gpu=True):
            _lm_step(t, PAD_B, l, mask=True)
    return t


def build_padded_varlen() -> TraceBuilder:
    """HF FlashAttention-2 unpad path: varlen q holds VARLEN_Q tokens of a [PAD_B, PAD_L] batch."""
    t = TraceBuilder("H100")
    for _ in range(PAD_STEPS):
        with t.step(wait_gpu=True):
            _lm_step(t, PAD_B, PAD_L, mask=False, varlen_q=VARLEN_Q)
    return t


def build_packed() -> TraceBuilder:
    """Packed (padding-free) batches: one [1, B*L] row, varlen attention over all of its tokens."""
    t = TraceBuilder("H100")
    steps = []
    for _ in range(PAD_STEPS):
        steps.append(
            {
                "step": t.step_no,
                "batch_size": 1,
                "seq_len": PAD_B * PAD_L,
                "real_tokens": PAD_B * PAD_L,
                "padded_tokens": PAD_B * PAD_L,
            }
        )
        with t.step(wait_gpu=True):
            _lm_step(t, 1, PAD_B * PAD_L, mask=False, varlen_q=PAD_B * PAD_L)
    t.meta["traceinspect"] = _run_config(steps, packing=True)
    return t


def build_fixed_length() -> TraceBuilder:
    """Synthetic fixed-length inputs ([B, 2048] every step), no mask, flash SDPA: not padding."""
    t = TraceBuilder("H100")
    for _ in range(PAD_STEPS):
        with t.step(wait_gpu=True):
            _lm_step(t, PAD_B, 2048, mask=False)
    return t
