"""The detector catalogue: each detector's code, name and one-line summary, in registry order.

The one place these are written. It imports nothing but the standard library, so listing the
detectors (`traceinspect detectors`), matching --select/--ignore and naming the detectors a config
turned off never load pandas or a detector module. The detector classes (traceinspect.detectors) get
their name and summary from here by their code.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    code: str
    name: str
    module: str  # traceinspect.detectors.<module>
    cls: str  # its class there
    summary: str


CATALOGUE: tuple[Entry, ...] = (
    Entry(
        "TI101",
        "launch-bound",
        "launch_bound",
        "LaunchBound",
        "GPU idles between short kernels while the host launches them (batch too small)",
    ),
    Entry(
        "TI102",
        "padding-waste",
        "padding_waste",
        "PaddingWaste",
        "GPU work on pad tokens: variable-length batches padded instead of packed",
    ),
    Entry(
        "TI103",
        "eager-attention",
        "eager_attention",
        "EagerAttention",
        "unfused attention (bmm + softmax + mask/dropout + bmm) instead of a fused attention kernel",
    ),
    Entry(
        "TI104",
        "dataloader-stall",
        "dataloader_stall",
        "DataloaderStall",
        "GPU idle while the host waits for the next batch from the DataLoader",
    ),
    Entry(
        "TI105",
        "cpu-offload",
        "cpu_offload",
        "CpuOffload",
        "Optimizer states or parameters in host memory cross PCIe every step (GPU memory capacity limit)",
    ),
    Entry(
        "TI106",
        "fp32-gemm",
        "fp32_gemm",
        "Fp32Gemm",
        "fp32 matmuls / convolutions on CUDA cores of a GPU with tensor cores",
    ),
    Entry(
        "TI107",
        "far-from-roofline",
        "far_from_roofline",
        "FarFromRoofline",
        "Op shapes whose kernels run at a small share of the GPU's roofline (degenerate shapes)",
    ),
    Entry(
        "TI201",
        "host-sync",
        "host_sync",
        "HostSync",
        "Synchronising calls (.item(), nonzero, blocking copies) inside the step leave the GPU idle",
    ),
    Entry(
        "TI206",
        "host-bound",
        "host_bound",
        "HostBound",
        "GPU idle while the launching thread does other CPU work (Python, CPU tensors, logging, compile, gc)",
    ),
    Entry(
        "TI202",
        "unfused-optimizer",
        "unfused_optimizer",
        "UnfusedOptimizer",
        "Optimizer step made of many small per-parameter or multi-tensor kernels instead of a fused one",
    ),
    Entry(
        "TI203",
        "exposed-communication",
        "exposed_communication",
        "ExposedCommunication",
        "NCCL/RCCL collective time not overlapped with compute",
    ),
    Entry(
        "TI204",
        "pageable-memcpy",
        "pageable_memcpy",
        "PageableMemcpy",
        "Host<->device copies through pageable memory: half the bus bandwidth and a blocked host",
    ),
    Entry(
        "TI205",
        "allocator-churn",
        "allocator_churn",
        "AllocatorChurn",
        "cudaMalloc/cudaFree calls in steady-state steps stall the GPU",
    ),
)

BY_CODE = {e.code: e for e in CATALOGUE}
BY_KEY = {**BY_CODE, **{e.name: e for e in CATALOGUE}}
