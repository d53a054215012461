"""Kernel-name classification: what a GPU kernel computes (GEMM, convolution, fused attention, softmax...)
and in which precision, read from its demangled name (SIGNATURES.md sections 4.2 and 7.2).

Pure functions over names. The vectorised entry points classify each distinct name once (pandas
Categorical categories) and broadcast the result to the rows. Must not read trace tables beyond names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from ..trace.tables import name_flags

# kinds
GEMM = "gemm"  # dense matrix multiply (cuBLAS / cuBLASLt / CUTLASS / Tensile / hipBLASLt / Triton matmul)
CONV = "conv"  # convolution math (cuDNN, CUTLASS conv, MIOpen, CK conv)
GEMV = "gemv"  # matrix-vector / rank-1 / dot: bandwidth-bound, tensor cores do not help
ATTENTION = "attention"  # fused attention (FlashAttention 2/3/4, SDPA flash / mem-efficient / cuDNN, CK / AOTriton)
SOFTMAX = "softmax"  # eager softmax forward or backward
DROPOUT = "dropout"
MASK = "mask"  # masked_fill
OTHER = "other"
KINDS = (GEMM, CONV, GEMV, ATTENTION, SOFTMAX, DROPOUT, MASK, OTHER)

# precisions of GEMM / convolution kernels
FP32 = "fp32"  # fp32 on CUDA cores / SIMT (FFMA): no tensor cores
TF32 = "tf32"  # fp32 data on TF32 tensor cores (or ROCm xf32)
HALF = "half"  # fp16 / bf16 tensor cores
FP8 = "fp8"  # fp8 / fp4 / mx formats
INT8 = "int8"
FP64 = "fp64"
COMPLEX = "complex"  # cgemm / zgemm (FFT convolutions): tensor cores do not apply
UNKNOWN = "unknown"
PRECISIONS = (FP32, TF32, HALF, FP8, INT8, FP64, COMPLEX, UNKNOWN)


@dataclass(frozen=True)
class KernelClass:
    kind: str
    precision: str
    arch: int  # SM the kernel was built for from its name prefix (70, 75, 80, 90, ...); 0 when absent


# --- name patterns ----------------------------------------------------------------------------------

_ATTENTION = re.compile(
    r"flash_fwd|flash_bwd|flashattn|flash::|flashattention|fmha|attn_fwd|attn_bwd|_sdpa_|flash_fprop|"
    r"flash_bprop|attentionkernel|efficient_attention|bwd_kernel_dk_dv|bwd_kernel_dq|paged_attention|"
    r"fused_multihead_attention",
    re.I,
)
_SOFTMAX = re.compile(r"softmax", re.I)
_DROPOUT = re.compile(r"dropout", re.I)
_MASK = re.compile(r"masked_fill", re.I)
_GEMV = re.compile(r"gemv|gemmk1_kernel|\bdot_kernel|splitkreduce|reduce_1block_kernel", re.I)
_CONV = re.compile(
    r"conv(?!ert)|scudnn|hcudnn|fprop|dgrad|wgrad|winograd|igemm_(?:fwd|bwd|wrw)|implicit_gemm|"
    r"implicitgemm",
    re.I,
)
# Every pattern here runs in time linear in the name: literal alternations, anchored prefixes, and no
# `.*` or `\w*` between two words (Python's re retries those from every occurrence of the first word,
# which is quadratic: 1.3 s for 20 KB of "cutlass"). Those two-word tests are plain str.find below.
_CONV_HELPER = re.compile(r"im2col|col2im|nchwtonhwc|nhwctonchw|transpose|scalepacked", re.I)
_GEMM = re.compile(r"gemm|^cijk_|nvjet|xmma_gemm|matmul|^bmm_", re.I)
_WORD = re.compile(r"\w+")
_TENSILE = re.compile(r"^Cijk_A[a-z]+_B[a-z]+_([A-Z0-9]+)(?:_|$)")
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]{3})_", re.I)
_ARCH_WORD = re.compile(r"(?:^|[^a-z])(maxwell|pascal|volta|turing|ampere|ada|hopper)_", re.I)
_ARCH_SM = re.compile(r"(?:^|[^a-z0-9])(?:sm|cutlass_)(\d{2,3})[a-z]?_", re.I)
_ARCH_WORDS = {"maxwell": 50, "pascal": 60, "volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90}
_TEMPLATE_TYPES = {
    "float": FP32,
    "double": FP64,
    "__half": HALF,
    "c10::Half": HALF,
    "__nv_bfloat16": HALF,
    "c10::BFloat16": HALF,
    "__hip_bfloat16": HALF,
    "half": HALF,
}
_FLOAT_T = r"(?:float|double|__half|c10::Half|__nv_bfloat16|c10::BFloat16|__hip_bfloat16|half)\b"
# a template argument that is a floating-point type (matched at the argument's start)
_FLOAT_ARG = re.compile(r"\s*(" + _FLOAT_T + ")")
_ARG_END = re.compile(r"[<>,]")


def _first_float_template(name: str) -> str | None:
    """The first template argument that is a floating-point type, skipping integer / bool / constant
    arguments, in the argument list opened by any `<`. A scan, not one regular expression: the
    pattern `<(?:\\s*(?!float)[^<>,]*,)*\\s*(float)` backtracks exponentially on `<  ,  ,  , x`
    (18 s for 16 arguments). Each `<` scans only up to the next `<` or `>`, so this is linear."""
    i = name.find("<")
    while i >= 0:
        j = i + 1
        while True:
            m = _FLOAT_ARG.match(name, j)
            if m:
                return m.group(1)
            e = _ARG_END.search(name, j)
            if e is None or name[e.start()] != ",":
                break
            j = e.end()
        i = name.find("<", i + 1)
    return None


_FP8_TOKENS = ("e4m3", "e5m2", "fp8", "mxfp4", "e2m1", "nvfp4", "float8")
_INT8_TOKENS = ("i8816", "i16832", "int8", "imma", "igemm_int8")
_HALF_TOKENS = ("bf16", "bfloat16", "fp16", "f16", "half", "h884", "h1688", "h16816", "hgemm", "hmma", "wmma", "hcudnn")
_FP64_TOKENS = ("dgemm", "d884", "dmma", "double")
_COMPLEX_TOKENS = ("cgemm", "zgemm", "gcgemm")
_FP32_TOKENS = ("sgemm", "ffma", "scudnn", "f32f32_f32f32", "_fp32_", "simt_s")


def _conv_helper(ident: str) -> bool:
    """_CONV_HELPER, or `compute\\w*offsets` (cuDNN's computeOffsetsKernel) within one word."""
    if _CONV_HELPER.search(ident):
        return True
    for w in _WORD.finditer(ident.lower()):
        i = w.group().find("compute")
        if i >= 0 and w.group().find("offsets", i + 7) >= 0:
            return True
    return False


def _is_gemm(head: str) -> bool:
    """_GEMM, or `cutlass` followed later by `tensorop` / `simt` (CUTLASS's own GEMM kernels)."""
    if _GEMM.search(head):
        return True
    low = head.lower()
    i = low.find("cutlass")
    return i >= 0 and (low.find("tensorop", i + 7) >= 0 or low.find("simt", i + 7) >= 0)


def _tensile_precision(name: str) -> str | None:
    m = _TENSILE.match(name)
    if not m:
        return None
    t = m.group(1)
    if t.startswith(("F8", "B8", "F8B8", "B8F8")):
        return FP8
    if t.startswith("I"):
        return INT8
    c = t[0]
    return {"S": FP32, "D": FP64, "H": HALF, "B": HALF, "X": TF32, "C": COMPLEX, "Z": COMPLEX}.get(c, UNKNOWN)


def _precision(name: str) -> str:
    """Math precision of a GEMM / convolution kernel from its name (SIGNATURES.md 7.2)."""
    n = name.lower()
    p = _tensile_precision(name)
    if p is not None:
        return p
    if any(t in n for t in _FP8_TOKENS):
        return FP8
    if any(t in n for t in _INT8_TOKENS):
        return INT8
    if "tf32" in n or "xf32" in n:
        return TF32
    m = _NVJET.search(name)
    if m:
        a = m.group(1).lower()[0]
        return HALF if a in "htb" else UNKNOWN
    if any(t in n for t in _HALF_TOKENS):
        return HALF
    if any(t in n for t in _COMPLEX_TOKENS):
        return COMPLEX
    if any(t in n for t in _FP64_TOKENS):
        return FP64
    # CUTLASS "tensorop_s1688gemm" / "tensorop_s1688fprop" with no fp16/bf16 token: fp32 data on TF32 tensor cores
    if re.search(r"tensorop_s\d+(?:gemm|fprop|dgrad|wgrad)", n):
        return TF32
    if any(t in n for t in _FP32_TOKENS):
        return FP32
    # templated library kernels (cuDNN, cuBLAS small-GEMM): the first floating-point template argument
    t = _first_float_template(name.replace("(anonymous namespace)", "").split("(", 1)[0])
    if t:
        return _TEMPLATE_TYPES[t]
    return UNKNOWN


def _arch(name: str) -> int:
    best = 0
    for m in _ARCH_WORD.finditer(name):
        best = max(best, _ARCH_WORDS[m.group(1).lower()])
    for m in _ARCH_SM.finditer(name):
        v = int(m.group(1))
        best = max(best, v if v >= 50 else 0)
    return best


def _parts(name: str) -> tuple[str, str]:
    """(ident, head): the function's own name (no template arguments) and the name up to its parameter
    list (template arguments included: CUTLASS wraps the real kernel name in cutlass::Kernel<...>)."""
    # "fbgemm_gpu::" is a library namespace (embedding ops, quantisation), not a GEMM
    s = name.replace("(anonymous namespace)", "").replace("fbgemm", "fbg").strip()
    if s.startswith("void "):
        s = s[5:]
    head = s.split("(", 1)[0]
    ident = re.split(r"[<(]", s, maxsplit=1)[0]
    return ident, head


@lru_cache(maxsize=65536)
def classify_name(name: str) -> KernelClass:
    """Kind, precision and name-derived SM of one kernel name."""
    name = name or ""
    arch = _arch(name)
    ident, head = _parts(name)
    if ident.startswith("triton_"):
        # inductor kernels are named after the ops they fuse ("..._softmax_...", "..._addmm_..."):
        # only a fused softmax is told apart; the rest is pointwise / reduction work
        return KernelClass(SOFTMAX if _SOFTMAX.search(ident) else OTHER, UNKNOWN, arch)
    if _ATTENTION.search(head):
        return KernelClass(ATTENTION, UNKNOWN, arch)
    if _SOFTMAX.search(head):
        return KernelClass(SOFTMAX, UNKNOWN, arch)
    if _DROPOUT.search(head):
        return KernelClass(DROPOUT, UNKNOWN, arch)
    if _MASK.search(head):
        return KernelClass(MASK, UNKNOWN, arch)
    if _GEMV.search(ident):
        return KernelClass(GEMV, _precision(name), arch)
    if _CONV.search(head) and not _conv_helper(ident):
        return KernelClass(CONV, _precision(name), arch)
    if _is_gemm(head):
        return KernelClass(GEMM, _precision(name), arch)
    return KernelClass(OTHER, UNKNOWN, arch)


def classify(names) -> pd.DataFrame:
    """Row-aligned kind / precision / arch for a column of kernel names (each distinct name classified once)."""
    cats = names.cat if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype) else None
    cat = pd.Categorical(names) if cats is None else names.array
    classes = [classify_name(str(c)) for c in cat.categories]
    codes = np.asarray(cat.codes)
    ok = codes >= 0
    idx = np.maximum(codes, 0)
    # codes into KINDS / PRECISIONS per distinct name, then one integer gather per row (no object arrays)
    kinds = np.array([KINDS.index(c.kind) for c in classes] or [KINDS.index(OTHER)], dtype=np.int8)
    precs = np.array([PRECISIONS.index(c.precision) for c in classes] or [PRECISIONS.index(UNKNOWN)], dtype=np.int8)
    archs = np.array([c.arch for c in classes] or [0], dtype=np.int64)
    index = names.index if isinstance(names, pd.Series) else None
    return pd.DataFrame(
        {
            "kind": pd.Categorical.from_codes(np.where(ok, kinds[idx], KINDS.index(OTHER)), categories=KINDS),
            "precision": pd.Categorical.from_codes(
                np.where(ok, precs[idx], PRECISIONS.index(UNKNOWN)), categories=PRECISIONS
            ),
            "arch": np.where(ok, archs[idx], 0),
        },
        index=index,
    )


def arch_floor(names) -> int:
    """The newest SM any kernel was built for (a lower bound on the device's SM), 0 if no name tells."""
    cat = (
        pd.Categorical(names)
        if not (isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype))
        else names.array
    )
    return max((classify_name(str(c)).arch for c in cat.categories), default=0)


# --- CPU-op names ------------------------------------------------------------------------------------

MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_addmm_activation",
        "aten::einsum",
    }
)
CONV_OPS = frozenset(
    {
        "aten::convolution",
        "aten::_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::convolution_backward",
        "aten::miopen_convolution",
        "aten::mkldnn_convolution",
    }
)
BATCHED_MATMUL_OPS = frozenset({"aten::bmm", "aten::baddbmm"})
SOFTMAX_OPS = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::_softmax_backward_data"})
_FUSED_ATTENTION_OP = re.compile(
    r"^aten::_scaled_dot_product_(?:flash|efficient|cudnn|fused)_attention|^aten::_flash_attention_|"
    r"^aten::_efficient_attention_|^flash_attn::|^xformers::|^FlashAttn|^_flash_attn|"
    r"ScaledDotProduct(?:Flash|Efficient|Cudnn|Fused)AttentionBackward|^aiter::|^aotriton"
)


def is_fused_attention_op(name: str) -> bool:
    return bool(_FUSED_ATTENTION_OP.search(name))


def flags_by_category(names, pred) -> np.ndarray:
    """pred(name) per row, once per distinct name: trace.tables.name_flags, the one per-name flag helper
    (this name is kept for existing callers)."""
    return name_flags(names if isinstance(names, pd.Series) else pd.Series(names, dtype=object), pred)
