"""Synthetic traces for the transfer detectors: CPU offload, exposed NCCL, pageable copies.

TransferBuilder adds cross-stream waits (cudaStreamWaitEvent semantics) and collective kernels to
TraceBuilder, so overlap between a communication / copy stream and the compute stream can be modelled.
"""

from __future__ import annotations

from builders import ELEMENTWISE, GEMM_BF16, TraceBuilder, _healthy_layer

MiB = 1 << 20
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
FUSED_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>"
)

# cpu-offload builder inputs (the tests derive expected numbers from these)
OFFLOAD_CHUNK = 64 * MiB  # one gradient / parameter chunk
OFFLOAD_CHUNKS = 16  # chunks per direction per step
OFFLOAD_COPY_US = 6400.0  # pageable PCIe copy of one chunk (~10.5 GB/s)
CPU_ADAM_US = 100_000.0  # DeepSpeedCPUAdam.step on the host

# exposed-communication builder inputs
NCCL_BUCKETS = 4
NCCL_US = 3000.0

# pageable-memcpy builder inputs
INPUT_BYTES = 20_000_000  # one pageable input batch copy: 20 MB in 2 ms = 10 GB/s
INPUT_COPY_US = 2000.0
OUTPUT_BYTES = 50_000_000  # logits to pageable host memory: 50 MB in 5 ms = 10 GB/s
OUTPUT_COPY_US = 5000.0


class TransferBuilder(TraceBuilder):
    def __init__(self, *args, node_gpus: int = 1, **kw):
        super().__init__(*args, **kw)
        self.node_gpus = node_gpus

    def build(self) -> dict:
        doc = super().build()
        if self.node_gpus > 1:  # one node's GPUs, as Kineto lists every visible device
            doc["deviceProperties"] = [dict(doc["deviceProperties"][0], id=i) for i in range(self.node_gpus)]
        return doc

    def wait_stream(self, waiter: int, on: int) -> "TransferBuilder":
        """cudaStreamWaitEvent: work queued on `waiter` from now on starts after `on` drains."""
        self.runtime_call("cudaStreamWaitEvent", 3.0, 147)
        self.stream_free[waiter] = max(self.stream_free.get(waiter, 0.0), self.stream_free.get(on, 0.0))
        return self

    def collective(
        self, coll: str, dur_us: float, *, stream: int = 20, kernel: str = ALLREDUCE, numel: int | None = None
    ) -> "TransferBuilder":
        """record_param_comms launching one NCCL kernel that carries the 'Collective name' arg; numel
        records the flattened bucket's shape (record_shapes=True)."""
        args = {"Collective name": coll}
        if numel is not None:
            args.update({"Input Dims": [[[numel]], [], []], "Input type": ["TensorList", "", "Scalar"]})
        with self.span("record_param_comms", args=args):
            self.now += 8
            self.kernel(kernel, dur_us, stream=stream, args={"Collective name": coll})
        return self


def _gemm(t: TraceBuilder, name: str, us: float, stream: int = 7) -> None:
    t.op(name, kernels=[(GEMM_BF16, us)], cpu_us=15, stream=stream)


def build_cpu_offload(steps: int = 3) -> TransferBuilder:
    """ZeRO-Offload (DeepSpeed defaults, pageable buffers): after the bf16 forward/backward, 16 x 64 MiB
    gradient chunks go device-to-host, DeepSpeedCPUAdam runs 100 ms on the host with no kernels, then
    16 x 64 MiB updated parameter chunks come back host-to-device."""
    t = TransferBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            with t.span("aten::to"):
                t.memcpy("HtoD", "Pinned", "Device", nbytes=MiB, dur_us=40)  # the input batch
            for _ in range(12):
                _gemm(t, "aten::linear", 2000)
            for _ in range(12):
                _gemm(t, "autograd::engine::evaluate_function: MmBackward0", 2000)
            for _ in range(OFFLOAD_CHUNKS):
                with t.span("aten::copy_"):
                    t.memcpy("DtoH", "Device", "Pageable", nbytes=OFFLOAD_CHUNK, dur_us=OFFLOAD_COPY_US)
            with t.span("Optimizer.step#DeepSpeedCPUAdam.step", cat="user_annotation"):
                t.cpu(CPU_ADAM_US)
            for _ in range(OFFLOAD_CHUNKS):
                with t.span("aten::copy_"):
                    t.memcpy("HtoD", "Pageable", "Device", nbytes=OFFLOAD_CHUNK, dur_us=OFFLOAD_COPY_US)
    return t


def build_fsdp_param_offload(steps: int = 3) -> TransferBuilder:
    """FSDP CPUOffload(offload_params=True): pinned 32 MiB parameter shards prefetched host-to-device on a
    copy stream before each layer (forward and backward), pinned gradients device-to-host after each
    backward layer, and AdamW running on the CPU (aten ops, no kernels)."""
    t = TransferBuilder()
    layers = 8
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            t.memcpy("HtoD", "Pinned", "Device", nbytes=MiB, dur_us=40)
            for phase in ("forward", "backward"):
                with t.span(f"FSDP::pre_{phase}", cat="user_annotation"):
                    t.memcpy("HtoD", "Pinned", "Device", nbytes=32 * MiB, dur_us=1400, stream=9, blocking=False)
                for i in range(layers):
                    t.wait_stream(7, 9)
                    if i + 1 < layers:
                        with t.span(f"FSDP::pre_{phase}", cat="user_annotation"):
                            t.memcpy("HtoD", "Pinned", "Device", nbytes=32 * MiB, dur_us=1400, stream=9, blocking=False)
                    _gemm(
                        t,
                        "aten::linear" if phase == "forward" else "autograd::engine::evaluate_function: MmBackward0",
                        1000,
                    )
                    if phase == "backward":
                        t.wait_stream(9, 7)
                        with t.span("FSDP::post_backward_reduce", cat="user_annotation"):
                            t.memcpy("DtoH", "Device", "Pinned", nbytes=32 * MiB, dur_us=1400, stream=9, blocking=False)
            t.sync("cudaStreamSynchronize")
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                for _ in range(40):
                    t.op("aten::_foreach_add_", cpu_us=1000)  # CPU tensors: no kernels
    return t


def build_weight_offload_inference(steps: int = 3) -> TransferBuilder:
    """Inference with weights offloaded to the host (accelerate device_map with 'cpu'): each of 24
    layers streams its 16 MiB of pinned weights host-to-device right before its GEMM."""
    t = TransferBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            t.memcpy("HtoD", "Pinned", "Device", nbytes=MiB, dur_us=40)
            for _ in range(24):
                _gemm(t, "aten::linear", 300)
                with t.span("aten::to"):
                    t.memcpy("HtoD", "Pinned", "Device", nbytes=16 * MiB, dur_us=700)
                _gemm(t, "aten::linear", 300)
    return t


def build_input_copies_only(steps: int = 4, gpu: str = "H100") -> TransferBuilder:
    """An ordinary training step whose only host copy is one 20 MB pageable input batch (pin_memory=False)."""
    t = TransferBuilder(gpu)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            with t.span("aten::to"):
                t.memcpy("HtoD", "Pageable", "Device", nbytes=INPUT_BYTES, dur_us=INPUT_COPY_US)
            for _ in range(12):
                _healthy_layer(t)
    return t


def build_pageable_outputs(steps: int = 4) -> TransferBuilder:
    """Inference that copies 50 MB of logits to pageable host memory after every batch (`.cpu()`)."""
    t = TransferBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50, workers=True)
            t.memcpy("HtoD", "Pinned", "Device", nbytes=MiB, dur_us=40)
            for _ in range(12):
                _healthy_layer(t)
            with t.span("aten::to"):
                t.memcpy("DtoH", "Device", "Pageable", nbytes=OUTPUT_BYTES, dur_us=OUTPUT_COPY_US)
    return t


def _ddp_step(
    t: TransferBuilder,
    overlapped: bool,
    bucket_us: float = NCCL_US,
    numel: int | None = None,
    buckets: int = NCCL_BUCKETS,
) -> None:
    t.dataloader(50, workers=True)
    t.memcpy("HtoD", "Pinned", "Device", nbytes=MiB, dur_us=40)
    for _ in range(12):
        _gemm(t, "aten::linear", 1000)
    for i in range(12):
        _gemm(t, "autograd::engine::evaluate_function: MmBackward0", 1000)
        if overlapped and i % 3 == 2 and i < 11:
            t.collective("allreduce", 500)  # a bucket is ready: reduced while backward continues
    if overlapped:
        t.wait_stream(20, 7)
        t.collective("allreduce", 200)  # the last bucket cannot overlap
    else:
        t.wait_stream(20, 7)  # all buckets reduced only after backward
        for _ in range(buckets):
            t.collective("allreduce", bucket_us, numel=numel)
    t.wait_stream(7, 20)
    with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
        t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAM, 400)])
    t.op("aten::add", kernels=[(ELEMENTWISE, 50)])


def build_exposed_nccl(steps: int = 3) -> TransferBuilder:
    """DDP rank whose 4 gradient all-reduces (3 ms each) run on the NCCL stream only after backward."""
    t = TransferBuilder(rank=0, world_size=8)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _ddp_step(t, overlapped=False)
    return t


def build_overlapped_nccl(steps: int = 3) -> TransferBuilder:
    """DDP rank whose bucket all-reduces run during backward on the NCCL stream; only the last 0.2 ms
    bucket is exposed."""
    t = TransferBuilder(rank=0, world_size=8)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _ddp_step(t, overlapped=True)
    return t


STRAGGLER_NUMEL = 2_873_320  # elements of one gradient bucket
STRAGGLER_US = 8000.0  # its all-reduce kernel: mostly spinning until the slow rank arrives


def build_straggler_nccl(steps: int = 3) -> TransferBuilder:
    """Rank 0 of 8 on one node: two 2.87M-element all-reduces take 8 ms each after backward, far longer
    than the bytes need (<= 1.4 GB/s even at 4 B/element): this rank waits for a slower one."""
    t = TransferBuilder(rank=0, world_size=8, node_gpus=8)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _ddp_step(t, overlapped=False, bucket_us=STRAGGLER_US, numel=STRAGGLER_NUMEL, buckets=2)
    return t
