"""Known GPUs: peak rates used by estimates. Dense numbers (no 2:4 sparsity), TFLOP/s and GB/s.

Sources: ../shared/docs/SIGNATURES.md section 10 (vendor datasheets, dense figures). A GPU that is not
listed gets peaks from its compute capability family, marked `approximate`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    name: str
    fp32_tflops: float        # CUDA-core / SIMT fp32
    tf32_tflops: float        # 0 where the GPU has no TF32 tensor cores
    half_tflops: float        # fp16/bf16 tensor cores, fp32 accumulate (bf16 only from sm80)
    mem_gbps: float
    host_link_gbps: float     # one direction, practical pinned PCIe figure
    bf16: bool                # bf16 tensor cores available
    approximate: bool = False


# (substring of the deviceProperties name, lower case) -> peaks; first match wins, so order matters.
KNOWN = (
    ("h200", Peaks("H200 SXM", 67, 494.7, 989.4, 4800, 50, True)),
    ("h100 pcie", Peaks("H100 PCIe", 51, 378, 756, 2000, 50, True)),
    ("h100", Peaks("H100 SXM", 67, 494.7, 989.4, 3350, 50, True)),
    ("h800", Peaks("H800", 67, 494.7, 989.4, 3350, 50, True)),
    ("b200", Peaks("B200", 80, 1100, 2250, 8000, 50, True, approximate=True)),
    ("a100", Peaks("A100", 19.5, 156, 312, 2039, 25, True)),
    ("a800", Peaks("A800", 19.5, 156, 312, 2039, 25, True)),
    ("a10g", Peaks("A10G", 31.2, 62.5, 125, 600, 25, True, approximate=True)),
    ("a10", Peaks("A10", 31.2, 62.5, 125, 600, 25, True)),
    ("l40", Peaks("L40", 90.5, 90.5, 181, 864, 25, True, approximate=True)),
    ("l4", Peaks("L4", 30.3, 60, 121, 300, 25, True)),
    ("4090", Peaks("RTX 4090", 82.6, 82.6, 165.2, 1008, 25, True)),
    ("3090", Peaks("RTX 3090", 35.6, 35.6, 71, 936, 25, True, approximate=True)),
    ("v100", Peaks("V100", 15.7, 0, 125, 900, 12, False)),
    ("t4", Peaks("T4", 8.1, 0, 65, 320, 12, False)),
    ("2080 ti", Peaks("RTX 2080 Ti", 13.4, 0, 53.8, 616, 12, False, approximate=True)),
    ("mi300", Peaks("MI300X", 163.4, 653.7, 1307.4, 5300, 50, True)),
    ("mi250", Peaks("MI250X", 47.9, 0, 383, 3200, 25, True, approximate=True)),
    ("mi210", Peaks("MI210", 22.6, 0, 181, 1600, 25, True, approximate=True)),
)


def peaks_for(name: str, compute_major: int | None) -> Peaks | None:
    n = (name or "").lower()
    for key, p in KNOWN:
        if key in n:
            return p
    if compute_major is None:
        return None
    # unknown GPU: ratios of its architecture family, absolute values are placeholders
    if compute_major >= 9:
        return Peaks(f"sm{compute_major}x", 60, 400, 800, 3000, 50, True, approximate=True)
    if compute_major == 8:
        return Peaks("sm8x", 20, 80, 160, 1000, 25, True, approximate=True)
    if compute_major == 7:
        return Peaks("sm7x", 14, 0, 100, 800, 12, False, approximate=True)
    return None
