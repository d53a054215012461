"""Known GPUs: the peak rates every estimate divides by. Dense numbers (no 2:4 sparsity), TFLOP/s and GB/s.

Owns the one peak table (with a source per row) and the override file for GPUs it does not list
(TRACEINSPECT_HARDWARE=path.json). Must not read traces. Sources: docs/roofline.md and
../shared/docs/SIGNATURES.md section 10. A GPU that is not listed gets peaks from its compute
capability family, marked `approximate`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from ..errors import UsageError

HARDWARE_ENV = "TRACEINSPECT_HARDWARE"


@dataclass(frozen=True)
class Peaks:
    name: str
    fp32_tflops: float  # CUDA-core / SIMT (AMD: vector) fp32
    tf32_tflops: float  # TF32 tensor cores (AMD: xf32 matrix); 0 where the GPU has none
    half_tflops: float  # fp16/bf16 tensor (matrix) cores, fp32 accumulate
    mem_gbps: float  # device memory bandwidth
    host_link_gbps: float  # one direction, practical pinned PCIe figure
    bf16: bool  # bf16 tensor cores available
    approximate: bool = False
    fp8_tflops: float = 0.0  # fp8 tensor (matrix) cores; 0 where the GPU has none
    fp64_tflops: float = 0.0  # fp64 (tensor cores where the GPU has them)
    source: str = ""  # where the numbers come from

    def matrix_tflops(self, dtype: str, precision: str = "") -> float:
        """Peak of a GEMM / convolution / attention for its data type ("bf16", "fp16", "fp32",
        "fp8", "fp64"); precision is the kernel's math precision when its name tells (tf32)."""
        if dtype in ("bf16", "fp16"):
            return self.half_tflops if (dtype == "fp16" or self.bf16) else self.fp32_tflops
        if dtype == "fp8":
            return self.fp8_tflops or self.half_tflops
        if dtype == "fp64":
            return self.fp64_tflops or self.fp32_tflops / 2
        if dtype == "fp32" and precision == "tf32" and self.tf32_tflops:
            return self.tf32_tflops
        return self.fp32_tflops

    def matrix_unit(self, dtype: str, precision: str = "") -> str:
        """What matrix_tflops(dtype, precision) is the peak of, in words: "bf16 matrix" on a GPU with bf16
        matrix (tensor) cores, "fp32 (no bf16 tensor cores)" where it falls back; one branch per branch there."""
        unit = "matrix"  # NVIDIA tensor cores, AMD matrix cores
        if dtype in ("bf16", "fp16"):
            return f"{dtype} {unit}" if (dtype == "fp16" or self.bf16) else f"fp32 (no {dtype} {unit} cores)"
        if dtype == "fp8":
            return f"fp8 {unit}" if self.fp8_tflops else f"fp16 {unit} (no fp8 {unit} cores)"
        if dtype == "fp64":
            return "fp64" if self.fp64_tflops else "fp64 (half the fp32 rate assumed)"
        if dtype == "fp32" and precision == "tf32" and self.tf32_tflops:
            return f"TF32 {unit}"
        return "fp32"

    def vector_tflops(self) -> float:
        """Peak of elementwise / normalisation / reduction math (CUDA cores, vector units)."""
        return self.fp32_tflops


_DS = "dense"
# (substring of the deviceProperties name, lower case) -> peaks; first match wins, so order matters.
KNOWN = (
    (
        "gh200",
        Peaks(
            "GH200",
            67,
            494.7,
            989.4,
            4000,
            50,
            True,
            fp8_tflops=1978.9,
            fp64_tflops=67,
            source=f"NVIDIA GH200 datasheet (H100 96 GB HBM3), {_DS}",
        ),
    ),
    (
        "h200",
        Peaks(
            "H200 SXM",
            67,
            494.7,
            989.4,
            4800,
            50,
            True,
            fp8_tflops=1978.9,
            fp64_tflops=67,
            source=f"NVIDIA H200 datasheet (SXM), {_DS}",
        ),
    ),
    (
        "h100 pcie",
        Peaks(
            "H100 PCIe",
            51,
            378,
            756,
            2000,
            50,
            True,
            fp8_tflops=1513,
            fp64_tflops=51,
            source=f"NVIDIA H100 datasheet (PCIe), {_DS}",
        ),
    ),
    (
        "h100 nvl",
        Peaks(
            "H100 NVL",
            60,
            417.5,
            835,
            3900,
            50,
            True,
            fp8_tflops=1670.5,
            fp64_tflops=60,
            source=f"NVIDIA H100 datasheet (NVL, per GPU), {_DS}",
        ),
    ),
    (
        "h100",
        Peaks(
            "H100 SXM",
            67,
            494.7,
            989.4,
            3350,
            50,
            True,
            fp8_tflops=1978.9,
            fp64_tflops=67,
            source=f"NVIDIA H100 datasheet (SXM), {_DS}",
        ),
    ),
    (
        "h800",
        Peaks(
            "H800",
            67,
            494.7,
            989.4,
            3350,
            50,
            True,
            fp8_tflops=1978.9,
            fp64_tflops=1,
            source=f"NVIDIA H800 datasheet (SXM), {_DS}",
        ),
    ),
    (
        "b200",
        Peaks(
            "B200",
            75,
            1125,
            2250,
            8000,
            50,
            True,
            fp8_tflops=4500,
            fp64_tflops=37,
            source=f"NVIDIA HGX B200 datasheet divided by 8 GPUs, {_DS}",
        ),
    ),
    (
        "a100-sxm4-40gb",
        Peaks(
            "A100 40GB",
            19.5,
            156,
            312,
            1555,
            25,
            True,
            fp64_tflops=19.5,
            source=f"NVIDIA A100 datasheet (40GB SXM), {_DS}",
        ),
    ),
    (
        "a100-pcie-40gb",
        Peaks(
            "A100 40GB PCIe",
            19.5,
            156,
            312,
            1555,
            25,
            True,
            fp64_tflops=19.5,
            source=f"NVIDIA A100 datasheet (40GB PCIe), {_DS}",
        ),
    ),
    (
        "a100 80gb pcie",
        Peaks(
            "A100 80GB PCIe",
            19.5,
            156,
            312,
            1935,
            25,
            True,
            fp64_tflops=19.5,
            source=f"NVIDIA A100 datasheet (80GB PCIe), {_DS}",
        ),
    ),
    (
        "a100",
        Peaks(
            "A100", 19.5, 156, 312, 2039, 25, True, fp64_tflops=19.5, source=f"NVIDIA A100 datasheet (80GB SXM), {_DS}"
        ),
    ),
    (
        "a800",
        Peaks(
            "A800", 19.5, 156, 312, 2039, 25, True, fp64_tflops=19.5, source=f"NVIDIA A800 datasheet (80GB SXM), {_DS}"
        ),
    ),
    (
        "a10g",
        Peaks(
            "A10G",
            31.2,
            62.5,
            125,
            600,
            25,
            True,
            approximate=True,
            source="A10 datasheet figures (AWS does not publish A10G peaks)",
        ),
    ),
    ("a10", Peaks("A10", 31.2, 62.5, 125, 600, 25, True, source=f"NVIDIA A10 datasheet, {_DS}")),
    ("l40s", Peaks("L40S", 91.6, 183, 362, 864, 25, True, fp8_tflops=733, source=f"NVIDIA L40S datasheet, {_DS}")),
    (
        "l40",
        Peaks(
            "L40",
            90.5,
            90.5,
            181,
            864,
            25,
            True,
            fp8_tflops=362,
            approximate=True,
            source=f"NVIDIA L40 datasheet, {_DS}",
        ),
    ),
    ("l4", Peaks("L4", 30.3, 60, 121, 300, 25, True, fp8_tflops=242, source=f"NVIDIA L4 datasheet, {_DS}")),
    (
        "4090",
        Peaks(
            "RTX 4090",
            82.6,
            82.6,
            165.2,
            1008,
            25,
            True,
            fp8_tflops=330.3,
            source="Ada whitepaper (GeForce: fp32 accumulate at half rate)",
        ),
    ),
    (
        "3090",
        Peaks(
            "RTX 3090",
            35.6,
            35.6,
            71,
            936,
            25,
            True,
            approximate=True,
            source="Ampere GA102 whitepaper (GeForce: fp32 accumulate at half rate)",
        ),
    ),
    (
        "v100s",
        Peaks("V100S PCIe", 16.4, 0, 130, 1134, 12, False, fp64_tflops=8.2, source=f"NVIDIA V100S datasheet, {_DS}"),
    ),
    (
        "v100-pcie",
        Peaks("V100 PCIe", 14, 0, 112, 900, 12, False, fp64_tflops=7, source=f"NVIDIA V100 datasheet (PCIe), {_DS}"),
    ),
    (
        "v100",
        Peaks("V100", 15.7, 0, 125, 900, 12, False, fp64_tflops=7.8, source=f"NVIDIA V100 datasheet (SXM2), {_DS}"),
    ),
    ("t4", Peaks("T4", 8.1, 0, 65, 320, 12, False, source=f"NVIDIA T4 datasheet, {_DS}")),
    (
        "2080 ti",
        Peaks(
            "RTX 2080 Ti",
            13.4,
            0,
            53.8,
            616,
            12,
            False,
            approximate=True,
            source="Turing whitepaper (GeForce: fp32 accumulate at half rate)",
        ),
    ),
    (
        "mi325",
        Peaks(
            "MI325X",
            163.4,
            653.7,
            1307.4,
            6000,
            50,
            True,
            fp8_tflops=2614.9,
            fp64_tflops=163.4,
            source=f"AMD Instinct MI325X datasheet, {_DS}",
        ),
    ),
    (
        "mi300a",
        Peaks(
            "MI300A",
            122.6,
            490.3,
            980.6,
            5300,
            50,
            True,
            fp8_tflops=1961.2,
            fp64_tflops=122.6,
            source=f"AMD Instinct MI300A datasheet, {_DS}",
        ),
    ),
    (
        "mi300",
        Peaks(
            "MI300X",
            163.4,
            653.7,
            1307.4,
            5300,
            50,
            True,
            fp8_tflops=2614.9,
            fp64_tflops=163.4,
            source=f"AMD Instinct MI300X datasheet, {_DS}",
        ),
    ),
    (
        "mi250x",
        Peaks(
            "MI250X",
            47.9,
            0,
            383,
            3277,
            25,
            True,
            fp64_tflops=95.7,
            source=f"AMD Instinct MI250X datasheet (both dies), {_DS}",
        ),
    ),
    (
        "mi250",
        Peaks(
            "MI250",
            45.3,
            0,
            362.1,
            3277,
            25,
            True,
            fp64_tflops=90.5,
            source=f"AMD Instinct MI250 datasheet (both dies), {_DS}",
        ),
    ),
    (
        "mi210",
        Peaks("MI210", 22.6, 0, 181, 1638, 25, True, fp64_tflops=45.3, source=f"AMD Instinct MI210 datasheet, {_DS}"),
    ),
)

_NUMBERS = ("fp32_tflops", "tf32_tflops", "half_tflops", "mem_gbps", "host_link_gbps", "fp8_tflops", "fp64_tflops")


def peaks_for(name: str, compute_major: int | None) -> Peaks | None:
    n = (name or "").lower()
    for key, p in overrides() + KNOWN:
        if key in n:
            return p
    if compute_major is None:
        return None
    # unknown GPU: ratios of its architecture family, absolute values are placeholders
    if compute_major >= 9:
        return Peaks(
            f"sm{compute_major}x",
            60,
            400,
            800,
            3000,
            50,
            True,
            approximate=True,
            source="placeholder for an unlisted sm9x GPU",
        )
    if compute_major == 8:
        return Peaks(
            "sm8x", 20, 80, 160, 1000, 25, True, approximate=True, source="placeholder for an unlisted sm8x GPU"
        )
    if compute_major == 7:
        return Peaks(
            "sm7x", 14, 0, 100, 800, 12, False, approximate=True, source="placeholder for an unlisted sm7x GPU"
        )
    return None


def override_path() -> str:
    return os.environ.get(HARDWARE_ENV, "")


def override_signature() -> str:
    """What a report cache key must include so that a changed override file is not served stale."""
    p = override_path()
    if not p:
        return ""
    try:
        st = os.stat(p)
        return f"{p}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return p


def overrides() -> tuple:
    p = override_path()
    if not p:
        return ()
    return _read_overrides(p, override_signature())


@lru_cache(maxsize=4)
def _read_overrides(path: str, _signature: str) -> tuple:
    """The override file: a JSON list of {"match": "substring of the GPU name", "name": ..., and any of
    the Peaks numbers}; numbers left out start from the built-in row the name matches, if any."""
    hint = (
        f"set {HARDWARE_ENV} to a JSON file holding a list of objects such as "
        '{"match": "rtx 6000", "name": "RTX 6000 Ada", "half_tflops": 364, "mem_gbps": 960}; see docs/roofline.md'
    )
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(1 << 20).decode("utf-8"))
    except OSError as e:
        raise UsageError(
            f"{HARDWARE_ENV}={path}: cannot read the hardware file ({e.strerror or e})", hint=hint
        ) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{HARDWARE_ENV}={path}: not a JSON file ({str(e)[:80]})", hint=hint) from None
    if not isinstance(doc, list):
        raise UsageError(f"{HARDWARE_ENV}={path}: expected a JSON list of GPU objects", hint=hint)
    out = []
    for i, row in enumerate(doc):
        where = f"{HARDWARE_ENV}={path}: entry {i}"
        if not isinstance(row, dict) or not isinstance(row.get("match"), str) or not row["match"].strip():
            raise UsageError(f"{where}: needs a non-empty string 'match' (a substring of the GPU name)", hint=hint)
        key = row["match"].strip().lower()
        base = next((p for k, p in KNOWN if k in key), None)
        vals = {}
        for f in _NUMBERS:
            if f in row:
                v = row[f]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise UsageError(f"{where}: '{f}' must be a number >= 0", hint=hint)
                vals[f] = float(v)
            elif base is None and f in ("fp32_tflops", "half_tflops", "mem_gbps"):
                raise UsageError(f"{where}: '{f}' is required for a GPU the built-in table does not know", hint=hint)
        name = row.get("name", key)
        if not isinstance(name, str):
            raise UsageError(f"{where}: 'name' must be a string", hint=hint)
        bf16 = row.get("bf16", base.bf16 if base else True)
        if not isinstance(bf16, bool):
            raise UsageError(f"{where}: 'bf16' must be true or false", hint=hint)
        src = f"override file {os.path.basename(path)}"
        if base is not None:
            p = replace(base, name=name[:64], bf16=bf16, approximate=False, source=src, **vals)
        else:
            p = Peaks(name=name[:64], bf16=bf16, source=src, **{"tf32_tflops": 0.0, "host_link_gbps": 25.0, **vals})
        out.append((key, p))
    return tuple(out)


PEAK_FIELDS = tuple(f.name for f in fields(Peaks))
