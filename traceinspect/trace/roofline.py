"""The efficiency model: FLOPs and bytes of one op call from its `Input Dims` / `Input type`, and the
roof (peak) that applies to it.

Owns the op-family formulas (docs/roofline.md). Must not read trace tables (facts/efficiency.py
builds the per-shape table) and must not judge (the far-from-roofline detector does). Every shape and type string is untrusted trace data:
anything that does not decode to the expected nesting of non-negative ints yields no model, never an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hardware import Peaks

# Input type string -> (dtype label, bytes per element)
DTYPES = {
    "c10::BFloat16": ("bf16", 2),
    "c10::Half": ("fp16", 2),
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp64", "fp8")

GEMM, BMM, CONV, ATTENTION = "gemm", "batched gemm", "convolution", "attention"
ELEMENTWISE, NORM, REDUCTION = "elementwise", "normalization", "reduction"
MATRIX_FAMILIES = (GEMM, BMM, CONV, ATTENTION)

_MM = {"aten::mm": 0, "aten::addmm": 1, "aten::_addmm_activation": 1}  # op -> index of A
_BMM = {"aten::bmm": 0, "aten::baddbmm": 1}
_CONV_FWD = frozenset(
    {
        "aten::convolution",
        "aten::_convolution",
        "aten::cudnn_convolution",
        "aten::miopen_convolution",
        "aten::mkldnn_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::_convolution_mode",
    }
)
_CONV_BWD = "aten::convolution_backward"
# fused attention, forward: layout of q/k/v ("bhld": [B, H, L, D]; "blhd": [B, L, H, D])
_ATTN_FWD = {
    "aten::scaled_dot_product_attention": "bhld",
    "aten::_scaled_dot_product_flash_attention": "bhld",
    "aten::_scaled_dot_product_efficient_attention": "bhld",
    "aten::_scaled_dot_product_cudnn_attention": "bhld",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "bhld",
    "aten::_flash_attention_forward": "blhd",
    "aten::_efficient_attention_forward": "blhd",
}
# backward: (grad_out, q, k, v, ...) in the same layouts
_ATTN_BWD = {
    "aten::_scaled_dot_product_flash_attention_backward": "bhld",
    "aten::_scaled_dot_product_efficient_attention_backward": "bhld",
    "aten::_scaled_dot_product_cudnn_attention_backward": "bhld",
    "aten::_flash_attention_backward": "blhd",
    "aten::_efficient_attention_backward": "blhd",
}
# elementwise: op -> FLOPs per output element (a count of the formula's arithmetic; these ops are
# memory-bound by an order of magnitude on every GPU in the table, so the bound does not hinge on it)
_EW = {
    "aten::add": 1,
    "aten::add_": 1,
    "aten::sub": 1,
    "aten::sub_": 1,
    "aten::mul": 1,
    "aten::mul_": 1,
    "aten::div": 1,
    "aten::div_": 1,
    "aten::addcmul_": 2,
    "aten::addcdiv_": 2,
    "aten::lerp_": 2,
    "aten::relu": 1,
    "aten::relu_": 1,
    "aten::threshold_backward": 1,
    "aten::gelu": 8,
    "aten::gelu_backward": 12,
    "aten::silu": 4,
    "aten::silu_": 4,
    "aten::silu_backward": 6,
    "aten::sigmoid": 4,
    "aten::tanh": 4,
    "aten::exp": 1,
    "aten::neg": 1,
    "aten::rsqrt": 1,
    "aten::sqrt": 1,
    "aten::pow": 1,
    "aten::masked_fill_": 1,
    "aten::masked_fill": 1,
    "aten::where": 1,
    "aten::native_dropout": 2,
    "aten::native_dropout_backward": 1,
    "aten::hardtanh_backward": 1,
    "aten::copy_": 0,
    "aten::clone": 0,
    "aten::fill_": 0,
    "aten::zero_": 0,
}
_WRITE_ONLY = frozenset({"aten::fill_", "aten::zero_"})
# normalisation: op -> (FLOPs per element, passes over the big tensor: reads + writes at minimum)
_NORM = {
    "aten::native_layer_norm": (5, 2),
    "aten::native_layer_norm_backward": (8, 3),
    "aten::native_batch_norm": (5, 2),
    "aten::native_batch_norm_backward": (8, 3),
    "aten::cudnn_batch_norm": (5, 2),
    "aten::cudnn_batch_norm_backward": (8, 3),
    "aten::miopen_batch_norm": (5, 2),
    "aten::miopen_batch_norm_backward": (8, 3),
    "aten::native_group_norm": (5, 2),
    "aten::native_group_norm_backward": (8, 3),
    "aten::_fused_rms_norm": (4, 2),
    "aten::_softmax": (5, 2),
    "aten::_log_softmax": (5, 2),
    "aten::_softmax_backward_data": (4, 3),
    "aten::_log_softmax_backward_data": (4, 3),
}
_REDUCE = frozenset(
    {
        "aten::sum",
        "aten::mean",
        "aten::amax",
        "aten::amin",
        "aten::max",
        "aten::min",
        "aten::norm",
        "aten::linalg_vector_norm",
        "aten::prod",
        "aten::var",
        "aten::std",
    }
)


@dataclass(frozen=True)
class Work:
    """What one call of an op must compute and move, at minimum."""

    family: str
    flops: float
    bytes: float
    dtype: str
    dims: dict  # the GEMM view (B, M, N, K) or the conv / attention sizes; {} for elementwise
    shape: str  # the input shapes, compact: "[96,3137,64] x [96,64,3137]"
    note: str = ""  # an assumption the numbers rest on


def _is_dims(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 40 for x in v)


def _numel(d) -> int:
    return math.prod(d) if _is_dims(d) else 0


def _tensors(dims, types) -> list[tuple[list, str, int]]:
    """(dims, dtype, element size) of each tensor argument, in order; scalars and lists left out."""
    out = []
    if not isinstance(dims, list) or not isinstance(types, list):
        return out
    for d, t in zip(dims, types):
        if isinstance(t, str) and t in DTYPES and _is_dims(d) and len(d) > 0:
            out.append((d, *DTYPES[t]))
    return out


def _fmt(dims: list) -> str:
    return "x".join(str(x) for x in dims) if dims else "scalar"


def _shape(ts) -> str:
    return ", ".join(f"[{_fmt(d)}]" for d, _, _ in ts)


def op_work(op: str, dims, types, conv_out: dict | None = None) -> Work | None:
    """FLOPs and bytes of one call of `op` from its Input Dims and Input type, or None when the op is
    not modelled or its arguments do not have the documented shapes."""
    try:
        return _work(op, dims, types, conv_out or {})
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _gemm(family, b, m, n, k, es, dtype, extra_bytes, shape, note="") -> Work | None:
    if min(b, m, n, k) <= 0:
        return None
    flops = 2.0 * b * m * n * k
    byts = float(es) * b * (m * k + k * n + m * n) + extra_bytes
    dims = {"M": m, "N": n, "K": k} if family == GEMM else {"B": b, "M": m, "N": n, "K": k}
    return Work(family, flops, byts, dtype, dims, shape, note)


def _incomplete(dims, types) -> bool:
    """An argument with sizes whose type is not a known tensor dtype (a TensorList, a nested list):
    its bytes cannot be counted, so the op gets no model rather than an undercount."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return True
    return any(
        isinstance(d, list) and len(d) > 0 and not (isinstance(t, str) and t in DTYPES) for d, t in zip(dims, types)
    )


def _work(op: str, dims, types, conv_out: dict) -> Work | None:
    if _incomplete(dims, types):
        return None
    ts = _tensors(dims, types)
    if op in _MM:
        i = _MM[op]
        if len(ts) < i + 2:
            return None
        (a, dt, es), (b, _, _) = ts[i], ts[i + 1]
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            return None
        extra = sum(_numel(d) * e for d, _, e in ts[:i])  # addmm's bias / C
        return _gemm(GEMM, 1, a[0], b[1], a[1], es, dt, extra, _shape(ts))
    if op in _BMM:
        i = _BMM[op]
        if len(ts) < i + 2:
            return None
        (a, dt, es), (b, _, _) = ts[i], ts[i + 1]
        if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
            return None
        extra = sum(_numel(d) * e for d, _, e in ts[:i])
        return _gemm(BMM, a[0], a[1], b[2], a[2], es, dt, extra, _shape(ts))
    if op in ("aten::linear", "aten::matmul"):
        if len(ts) < 2:
            return None
        (a, dt, es), (w, _, _) = ts[0], ts[1]
        if op == "aten::linear":  # weight [N, K]
            if len(a) < 1 or len(w) != 2 or a[-1] != w[1]:
                return None
            extra = sum(_numel(d) * e for d, _, e in ts[2:3])
            return _gemm(GEMM, 1, math.prod(a[:-1]), w[0], a[-1], es, dt, extra, _shape(ts))
        if len(a) < 2 or len(w) < 2 or a[-1] != w[-2]:
            return None
        if len(w) == 2:  # batch folded into M, as matmul does
            return _gemm(GEMM, 1, math.prod(a[:-1]), w[1], a[-1], es, dt, 0.0, _shape(ts))
        if a[:-2] != w[:-2]:
            return None  # broadcast batch: not modelled
        return _gemm(BMM, math.prod(a[:-2]), a[-2], w[-1], a[-1], es, dt, 0.0, _shape(ts))
    if op in _CONV_FWD or op == _CONV_BWD:
        return _conv(op, ts, conv_out)
    if op in _ATTN_FWD or op in _ATTN_BWD:
        bwd = op in _ATTN_BWD
        layout = _ATTN_BWD[op] if bwd else _ATTN_FWD[op]
        qkv = ts[1:4] if bwd else ts[0:3]
        if len(qkv) < 3 or any(len(d) != 4 for d, _, _ in qkv):
            return None
        (q, dt, es), (k, _, _), (v, _, _) = qkv
        if layout == "bhld":
            b, h, lq, d = q
            lk, dv = k[2], v[3]
        else:
            b, lq, h, d = q
            lk, dv = k[1], v[3]
        if min(b, h, lq, lk, d, dv) <= 0:
            return None
        fwd = 2.0 * b * h * lq * lk * (d + dv)  # Q K^T and P V
        out = b * h * lq * dv
        io = _numel(q) + _numel(k) + _numel(v) + out
        dims_ = {"B": b, "H": h, "Lq": lq, "Lk": lk, "D": d}
        note = "no causal mask assumed (a causal kernel does half the work)"
        if bwd:  # recomputes Q K^T, then dV, dP, dQ, dK: 2.5x the forward; reads q, k, v, out, dO, writes dq, dk, dv
            return Work(ATTENTION, 2.5 * fwd, float(es) * (2 * io + out), dt, dims_, _shape(ts), note)
        return Work(ATTENTION, fwd, float(es) * io, dt, dims_, _shape(ts), note)
    if op in _EW:
        if not ts:
            return None
        dt = next((t for _, t, _ in ts if t in FLOAT_DTYPES), ts[0][1])
        n = max(_numel(d) for d, _, _ in ts)
        if op in _WRITE_ONLY:
            byts = float(_numel(ts[0][0]) * ts[0][2])
        elif op == "aten::copy_":  # (dst, src): src read, dst written
            byts = float(sum(_numel(d) * e for d, _, e in ts[:2]))
        else:  # inputs read once, the result written once
            byts = float(sum(_numel(d) * e for d, _, e in ts) + n * ts[0][2])
        return Work(ELEMENTWISE, float(_EW[op] * n), byts, dt, {}, _shape(ts))
    if op in _NORM:
        if not ts:
            return None
        per, passes = _NORM[op]
        big, dt, es = max(ts, key=lambda t: _numel(t[0]))
        n = _numel(big)
        small = sum(_numel(d) * e for d, _, e in ts if d is not big and _numel(d) < n)
        return Work(NORM, float(per * n), float(passes * n * es + small), dt, {}, _shape(ts))
    if op in _REDUCE:
        if not ts:
            return None
        d, dt, es = ts[0]
        n = _numel(d)
        return Work(REDUCTION, float(n), float(n * es), dt, {}, _shape(ts), "output size neglected")
    return None


def _conv(op: str, ts, conv_out: dict) -> Work | None:
    if op == _CONV_BWD:  # (grad_out [N,K,*P], input [N,C,*S], weight [K,C/g,*R], ...)
        if len(ts) < 3:
            return None
        (go, dt, es), (x, _, _), (w, _, _) = ts[:3]
    else:  # (input [N,C,*S], weight [K,C/g,*R], bias, ...)
        if len(ts) < 2:
            return None
        (x, dt, es), (w, _, _) = ts[:2]
        go = None
        p = conv_out.get((tuple(x), tuple(w)))
        if p is not None:
            go = [x[0], w[0], *p]
    if len(x) < 3 or len(w) != len(x) or (go is not None and len(go) != len(x)):
        return None
    n, c = x[0], x[1]
    k, cg = w[0], w[1]
    if min(n, c, k, cg) <= 0 or c % cg:
        return None
    shape = _shape(ts[:3] if op == _CONV_BWD else ts[:2])
    dims = {"N": n, "C": c, "K": k, "groups": c // cg, "kernel": _fmt(w[2:]), "input": _fmt(x[2:])}
    if go is None:
        # the output size needs stride and padding, which Input Dims does not carry; only a backward
        # call with the same input and weight shapes (which does carry the output gradient) tells it
        return Work(
            CONV,
            float("nan"),
            float("nan"),
            dt,
            dims,
            shape,
            "output size unknown (stride/padding not in Input Dims, no backward call of this shape)",
        )
    dims["output"] = _fmt(go[2:])
    flops = 2.0 * n * k * math.prod(go[2:]) * cg * math.prod(w[2:])
    io = _numel(x) + _numel(w) + _numel(go)
    if op == _CONV_BWD:  # grad_input and grad_weight (output_mask is not in Input Dims)
        return Work(
            CONV, 2 * flops, float(es) * 2 * io, dt, dims, shape, "grad_input and grad_weight both assumed computed"
        )
    return Work(CONV, flops, float(es) * io, dt, dims, shape)


def conv_outputs(names, dims_list) -> dict:
    """(input dims, weight dims) -> output spatial dims, from the convolution_backward calls' grad_output."""
    out: dict = {}
    for name, dims in zip(names, dims_list):
        if name != _CONV_BWD or not isinstance(dims, list) or len(dims) < 3:
            continue
        go, x, w = dims[0], dims[1], dims[2]
        if _is_dims(go) and _is_dims(x) and _is_dims(w) and len(go) == len(x) == len(w) and len(go) >= 3:
            out[(tuple(x), tuple(w))] = tuple(go[2:])
    return out


def roof(peaks: Peaks | None, family: str, dtype: str, precision: str = "") -> float | None:
    """The compute roof (TFLOP/s) of one op: the matrix peak for its dtype for GEMM / convolution /
    attention, the vector peak otherwise. precision: the kernel's math precision when its name tells
    ("tf32", "fp32"); an fp32 convolution whose kernel does not tell gets the TF32 roof where the GPU
    has one, since cuDNN convolutions may use TF32 by default (torch.backends.cudnn.allow_tf32)."""
    return None if peaks is None else _roof(peaks, family, dtype, precision)[0]


def roof_unit(peaks: Peaks | None, family: str, dtype: str, precision: str = "") -> str:
    """The unit whose peak roof() returns, in words ("bf16 matrix", "fp32 vector"): a label that names
    the op's dtype for a rate the GPU runs at another precision would mislabel the number."""
    return "" if peaks is None else _roof(peaks, family, dtype, precision)[1]


def _roof(peaks: Peaks, family: str, dtype: str, precision: str) -> tuple[float, str]:
    if family in MATRIX_FAMILIES:
        if dtype == "fp32" and family == CONV and precision not in ("fp32", "tf32"):
            precision = "tf32"
        return peaks.matrix_tflops(dtype, precision), peaks.matrix_unit(dtype, precision)
    return peaks.vector_tflops(), "fp32 vector"
