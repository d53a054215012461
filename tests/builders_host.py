"""Builders for host-side killers: launch-bound loops, host syncs, unfused optimizers, allocator churn.

Each function returns a TraceBuilder (see builders.py). HostTraceBuilder adds the few host calls the
base builder lacks: a blocking cudaFree, a torch.nonzero-style sync, an optimizer step annotation.
"""

from __future__ import annotations

from builders import ELEMENTWISE, GEMM_BF16, TraceBuilder, _healthy_layer

ADD_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
MUL_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)"
ADDCDIV_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::addcdiv_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float, float)#1}, at::detail::Array<char*, 4> >(int, at::native::addcdiv_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float, float)#1}, at::detail::Array<char*, 4>)"
FUSED_ADAMW_KERNEL = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*)"
NONZERO_KERNEL = "void at::native::(anonymous namespace)::flag_kernel<512, 16, unsigned char>(at::native::(anonymous namespace)::flag_kernel_params)"


class HostTraceBuilder(TraceBuilder):
    def blocking_free(self, extra_us: float, name: str = "cudaFree") -> "HostTraceBuilder":
        """cudaFree waits for the device to drain, then releases memory for extra_us."""
        done = max(self.stream_free.values(), default=self.now)
        if self.rocm:
            name = name.replace("cuda", "hip")
        self.runtime_call(name, max(done - self.now, 0.0) + extra_us, cbid=22)
        return self

    def malloc(self, us: float, name: str = "cudaMalloc") -> "HostTraceBuilder":
        if self.rocm:
            name = name.replace("cuda", "hip")
        return self.runtime_call(name, us, cbid=20)

    def nonzero(self) -> "HostTraceBuilder":
        """torch.nonzero: a flag kernel, a DtoH copy of the count, then a stream sync (output size)."""
        with self.span("aten::nonzero"):
            self.now += 5
            self.kernel(NONZERO_KERNEL, 4.0)
            self.memcpy("DtoH", "Device", "Pinned", nbytes=8, dur_us=2.0, blocking=False)
            self.sync("cudaStreamSynchronize")
        return self

    def run_config(self, **config) -> "HostTraceBuilder":
        self.meta["traceinspect"] = {
            "schema_version": 1,
            "source": "hf_trainer",
            "framework": {},
            "config": config,
            "steps": [],
        }
        return self


def _forward_backward(t: TraceBuilder, layers: int) -> None:
    for _ in range(layers):
        _healthy_layer(t)


# --- launch-bound ----------------------------------------------------------------------------------


def build_launch_bound_hf(steps: int = 3, kernels_per_step: int = 400) -> TraceBuilder:
    """builders.build_launch_bound with HF Trainer run_config: batch 1 x accumulation 16."""
    t = HostTraceBuilder()
    t.run_config(per_device_train_batch_size=1, gradient_accumulation_steps=16)
    for _ in range(steps):
        with t.step():
            for _ in range(kernels_per_step):
                t.op("aten::add", kernels=[(ELEMENTWISE, 3.0)], cpu_us=20)
    return t


def build_busy_short_kernels(steps: int = 3) -> TraceBuilder:
    """Many short kernels (80% under 10 us) but the host runs ahead: the GPU stays ~99% busy.

    Each group: one 600 us GEMM, then four 4 us elementwise kernels launched in 1 us host ops; the
    host issues a group in ~60 us while the GPU needs ~616 us, so the queue never drains; the step
    ends with a synchronize so the steps span the GPU work.
    """
    t = TraceBuilder(launch_us=4.0)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(40):
                t.op("aten::linear", kernels=[(GEMM_BF16, 600.0)], cpu_us=10)
                for _ in range(4):
                    t.op("aten::add", kernels=[(ELEMENTWISE, 4.0)], cpu_us=1)
    return t


# --- host-sync ---------------------------------------------------------------------------------------


def build_item_sync(steps: int = 4, layers: int = 12, gemm_us: float = 300.0, after_us: float = 50.0) -> TraceBuilder:
    """`.item()` after every layer (e.g. logging a per-layer statistic), then after_us of Python.

    Per layer: a gemm_us GEMM, then aten::item (DtoH copy + cudaStreamSynchronize): the host waits
    for the GEMM, the GPU drains, and only after_us + 15 us op overhead + 5 us launch later does
    the next kernel start (see test_det_launch for the arithmetic).
    """
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            for _ in range(layers):
                t.op("aten::linear", kernels=[(GEMM_BF16, gemm_us)], cpu_us=15)
                t.item()
                t.cpu(after_us)
    return t


def build_nonzero_sync(steps: int = 4, layers: int = 12) -> TraceBuilder:
    """Boolean-mask indexing in every layer: aten::nonzero syncs to learn the output size."""
    t = HostTraceBuilder()
    for _ in range(steps):
        with t.step():
            for _ in range(layers):
                t.op("aten::linear", kernels=[(GEMM_BF16, 300.0)], cpu_us=15)
                with t.span("aten::index"):
                    t.nonzero()
                t.cpu(40)
    return t


def build_end_of_step_sync(steps: int = 4) -> TraceBuilder:
    """A healthy GPU-bound step that ends with one torch.cuda.synchronize(): a small, tolerated cost."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            for _ in range(12):
                _healthy_layer(t)
            t.cpu(20)
    return t


# --- unfused optimizer --------------------------------------------------------------------------------

OPT_CPU_US = 15.0  # host time of one per-parameter op before its launch
OPT_KERNEL_US = 2.5  # each per-parameter kernel


def _optimizer_prologue(t: TraceBuilder, layers: int) -> None:
    """Forward/backward (GPU-bound), then 12 ms of host work (zero_grad, clipping, logging) during
    which the GPU drains, so the optimizer starts on an idle GPU."""
    _forward_backward(t, layers)
    t.cpu(12_000)


def build_unfused_optimizer(steps: int = 4, params: int = 200, layers: int = 6) -> TraceBuilder:
    """torch.optim.AdamW(foreach=False): three tiny kernels per parameter inside Optimizer.step#AdamW.step.

    Each per-parameter op spends OPT_CPU_US on the host, launches (5 us) and runs OPT_KERNEL_US on the
    GPU, so consecutive optimizer kernels are 20 us apart and the GPU idles 17.5 us between them.
    """
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            _optimizer_prologue(t, layers)
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                for _ in range(params):
                    t.op("aten::mul_", kernels=[(MUL_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
                    t.op("aten::add_", kernels=[(ADD_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
                    t.op("aten::addcdiv_", kernels=[(ADDCDIV_KERNEL, OPT_KERNEL_US)], cpu_us=OPT_CPU_US)
    return t


def build_unfused_optimizer_hf(steps: int = 4, params: int = 200) -> TraceBuilder:
    """build_unfused_optimizer with HF run_config: optim="adamw_torch", 1e8 parameters (H100)."""
    t = build_unfused_optimizer(steps, params)
    HostTraceBuilder.run_config(
        t, per_device_train_batch_size=8, gradient_accumulation_steps=1, optim="adamw_torch", num_parameters=100_000_000
    )
    return t


def build_fused_optimizer(steps: int = 4, layers: int = 6) -> TraceBuilder:
    """AdamW(fused=True): one aten::_fused_adamw_ launching 4 multi-tensor kernels per step."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            _optimizer_prologue(t, layers)
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAMW_KERNEL, 150.0)] * 4, cpu_us=60)
    return t


# --- allocator churn ----------------------------------------------------------------------------------


def build_allocator_churn(
    steps: int = 4, layers: int = 6, free_us: float = 400.0, malloc_us: float = 200.0, gpu: str = "H100"
) -> TraceBuilder:
    """Dynamic shapes without a warm cache: every layer of every step frees (cudaFree waits for the
    device, then free_us) and re-allocates (cudaMalloc, malloc_us) while the GPU sits idle."""
    t = HostTraceBuilder(gpu)
    for _ in range(steps):
        with t.step():
            for _ in range(layers):
                _healthy_layer(t)
                t.blocking_free(free_us)
                t.malloc(malloc_us)
    return t


def build_allocator_warmup(steps: int = 4, layers: int = 6) -> TraceBuilder:
    """cudaMalloc only in the first step (the caching allocator warming up): not churn."""
    t = HostTraceBuilder()
    for i in range(steps):
        with t.step():
            for _ in range(layers):
                _healthy_layer(t)
                if i == 0:
                    t.malloc(300)
    return t


# --- host-bound ------------------------------------------------------------------------------------

HOST_BOUND_STEPS = 4
HOST_BOUND_CPU_US = 6000.0  # CPU-side tensor work on the launching thread, every step
HOST_BOUND_OP = "aten::cat"  # ... done by an op that launches no kernel (CPU tensors)


def build_host_bound(steps: int = HOST_BOUND_STEPS, cpu_us: float = HOST_BOUND_CPU_US) -> TraceBuilder:
    """Each step starts with cpu_us of CPU tensor work (an aten op with no kernel) while the GPU has drained
    (the previous step ended with loss.item()), then a healthy GPU-bound forward/backward."""
    t = HostTraceBuilder()
    for _ in range(steps):
        with t.step():
            t.op(HOST_BOUND_OP, cpu_us=cpu_us)
            _forward_backward(t, 6)
            t.item()
    return t


# --- eager attention masked behind launch-bound ------------------------------------------------------

MASKED_ATT_STEPS = 3
MASKED_ATT_CALLS = 20  # eager attention blocks per step
MASKED_ATT_ADDS = 300  # other tiny ops per step
MASKED_ATT_CPU_US = 20.0  # host time per op before its launch (plus the builder's 5 us launch call)
MASKED_ATT_KERNELS = (("bmm", 4.0), ("mul", 3.0), ("softmax", 4.0), ("dropout", 3.0), ("bmm", 4.0))


def build_launch_bound_eager_attention(steps: int = MASKED_ATT_STEPS) -> TraceBuilder:
    """Batch 1: tiny kernels behind ~25 us of host time each (launch-bound), with eager attention
    (bmm -> mul -> softmax -> dropout -> bmm, 3-4 us kernels) MASKED_ATT_CALLS times per step."""
    from builders_compute import BMM_BF16, DROPOUT, MUL_BF16, SOFTMAX_FWD

    names = {"bmm": BMM_BF16, "mul": MUL_BF16, "softmax": SOFTMAX_FWD, "dropout": DROPOUT}
    b, h, l, d = 1, 12, 64, 64
    bf = ["c10::BFloat16"] * 2
    c = MASKED_ATT_CPU_US
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            for i in range(MASKED_ATT_ADDS):
                t.op("aten::add", kernels=[(ELEMENTWISE, 3.0)], cpu_us=c)
                if i % (MASKED_ATT_ADDS // MASKED_ATT_CALLS) == 0:
                    (_, bmm_us), (_, mul_us), (_, soft_us), (_, drop_us), _ = MASKED_ATT_KERNELS
                    with t.span("aten::matmul"):
                        t.op(
                            "aten::bmm",
                            kernels=[(names["bmm"], bmm_us)],
                            cpu_us=c,
                            input_dims=[[b * h, l, d], [b * h, d, l]],
                            input_type=bf,
                        )
                    t.op("aten::mul", kernels=[(names["mul"], mul_us)], cpu_us=c, input_dims=[[b, h, l, l], []])
                    with t.span("aten::softmax"):
                        t.op(
                            "aten::_softmax",
                            kernels=[(names["softmax"], soft_us)],
                            cpu_us=c,
                            input_dims=[[b, h, l, l], [], []],
                            input_type=["c10::BFloat16", "Scalar", "Scalar"],
                        )
                    with t.span("aten::dropout"):
                        t.op(
                            "aten::native_dropout",
                            kernels=[(names["dropout"], drop_us)],
                            cpu_us=c,
                            input_dims=[[b, h, l, l], [], []],
                        )
                    with t.span("aten::matmul"):
                        t.op(
                            "aten::bmm",
                            kernels=[(names["bmm"], bmm_us)],
                            cpu_us=c,
                            input_dims=[[b * h, l, l], [b * h, l, d]],
                            input_type=bf,
                        )
    return t
