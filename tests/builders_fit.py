"""Builders for fix texts fitted to the run (issue 32 item 4): the same slowdowns in a vision, a language
and a recommender model, and launch-bound loops stepping different optimizers.

The layers are made of the ops PyTorch records for each kind of model: a vision layer is
aten::conv2d > aten::convolution > aten::cudnn_convolution, aten::batch_norm and aten::max_pool2d; a
language layer is a token lookup (aten::embedding) and scaled_dot_product_attention; a recommender
layer is a pooled sparse lookup (aten::embedding_bag) and an MLP.
"""

from __future__ import annotations

from builders import ELEMENTWISE, FLASH_FWD, GEMM_BF16, TraceBuilder, build_dataloader_stall
from builders_host import ADD_KERNEL, FUSED_ADAMW_KERNEL, MUL_KERNEL, HostTraceBuilder
from builders_profiler import ProfilerTraceBuilder

CONV_KERNEL = "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn"
BN_KERNEL = "void cudnn::bn_fw_tr_1C11_singleread_spec<__nv_bfloat16, float, 512, 1, 2, 0>(cudnnTensorStruct, __nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)"
POOL_KERNEL = "void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, float>(c10::BFloat16 const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*, long*)"
EMBEDDING_KERNEL = "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, unsigned int, long)"
EMBEDDING_BAG_KERNEL = "void at::native::(anonymous namespace)::embedding_bag_nbits_rowwise_offsets_kernel<float, int>(at::PackedTensorAccessor64<float, 2, at::RestrictPtrTraits>)"


def vision_layer(t: TraceBuilder) -> None:
    with t.span("aten::conv2d"):
        with t.span("aten::convolution"):
            with t.span("aten::_convolution"):
                t.op("aten::cudnn_convolution", kernels=[(CONV_KERNEL, 900.0)], cpu_us=15)
    with t.span("aten::batch_norm"):
        t.op("aten::cudnn_batch_norm", kernels=[(BN_KERNEL, 300.0)], cpu_us=10)
    with t.span("aten::max_pool2d"):
        t.op("aten::max_pool2d_with_indices", kernels=[(POOL_KERNEL, 200.0)], cpu_us=8)


def language_layer(t: TraceBuilder) -> None:
    t.op("aten::embedding", kernels=[(EMBEDDING_KERNEL, 100.0)], cpu_us=10)
    t.op("aten::linear", kernels=[(GEMM_BF16, 800.0)], cpu_us=15)
    t.op("aten::scaled_dot_product_attention", kernels=[(FLASH_FWD, 600.0)], cpu_us=15)


def recommender_layer(t: TraceBuilder) -> None:
    t.op("aten::embedding_bag", kernels=[(EMBEDDING_BAG_KERNEL, 300.0)], cpu_us=10)
    t.op("aten::linear", kernels=[(GEMM_BF16, 800.0)], cpu_us=15)
    t.op("aten::relu", kernels=[(ELEMENTWISE, 100.0)], cpu_us=8)


LAYERS = {"vision": vision_layer, "language": language_layer, "recommender": recommender_layer}


def build_dataloader_stall_family(family: str, steps: int = 4, load_us: float = 30_000) -> TraceBuilder:
    """builders.build_dataloader_stall (num_workers=0) whose layers are `family`'s ops."""
    return build_dataloader_stall(steps, load_us, layer=LAYERS[family])


def build_dataloader_stall_vision() -> TraceBuilder:
    return build_dataloader_stall_family("vision")


def build_dataloader_stall_language() -> TraceBuilder:
    return build_dataloader_stall_family("language")


def build_dataloader_stall_recommender() -> TraceBuilder:
    return build_dataloader_stall_family("recommender")


def build_host_bound_preprocess(family: str, python_name: str, steps: int = 4, cpu_us: float = 6000.0):
    """builders_host.build_host_bound whose host stretch is input preprocessing (Python function events
    named `python_name`, with_stack) on the launching thread, with `family`'s layers."""
    t = ProfilerTraceBuilder()
    t.settings(with_stack=1)
    layer = LAYERS[family]
    for _ in range(steps):
        with t.step():
            t.python_functions(10, cpu_us, name=python_name)
            for _ in range(6):
                layer(t)
            t.item()
    return t


def build_launch_bound_stepping(opt_class: str, fused: bool = False, steps: int = 3, kernels_per_step: int = 400):
    """builders.build_launch_bound (no run configuration: no batch, no accumulation recorded) whose steps
    end with an `Optimizer.step#<opt_class>.step`: a fused step (one multi-tensor op) or a for-loop one
    (a few per-parameter ops, too few for unfused-optimizer)."""
    t = HostTraceBuilder()
    for _ in range(steps):
        with t.step():
            for _ in range(kernels_per_step):
                t.op("aten::add", kernels=[(ELEMENTWISE, 3.0)], cpu_us=20)
            with t.span(f"Optimizer.step#{opt_class}.step", cat="user_annotation"):
                if fused:
                    t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAMW_KERNEL, 20.0)], cpu_us=30)
                else:
                    for _ in range(4):
                        t.op("aten::mul_", kernels=[(MUL_KERNEL, 2.5)], cpu_us=15)
                        t.op("aten::add_", kernels=[(ADD_KERNEL, 2.5)], cpu_us=15)
    return t
