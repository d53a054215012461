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
_CONV_BWD = "aten::convolution_backward"  # (grad_output, input, weight, ...): PyTorch >= 1.11
# the per-backend backward of PyTorch <= 1.10 (and its children, which launch the kernels):
# cudnn_convolution_backward(self, grad_output, weight, ...) computes both gradients through
# ..._backward_input(self_size, grad_output, weight, ...) and ..._backward_weight(weight_size, grad_output,
# self, ...) (aten/src/ATen/native/native_functions.yaml of those releases; mkldnn spells it "weights")
_CONV_BWD_XGW = frozenset(
    {"aten::cudnn_convolution_backward", "aten::miopen_convolution_backward", "aten::mkldnn_convolution_backward"}
)
_CONV_BWD_INPUT = frozenset(
    {
        "aten::cudnn_convolution_backward_input",
        "aten::miopen_convolution_backward_input",
        "aten::mkldnn_convolution_backward_input",
    }
)
_CONV_BWD_WEIGHT = frozenset(
    {
        "aten::cudnn_convolution_backward_weight",
        "aten::miopen_convolution_backward_weight",
        "aten::mkldnn_convolution_backward_weights",
    }
)
_CONV_ALL = _CONV_FWD | {_CONV_BWD} | _CONV_BWD_XGW | _CONV_BWD_INPUT | _CONV_BWD_WEIGHT
CONV_OPS = _CONV_ALL  # every op conv_geometry reads
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
    "aten::clamp_min": 1,  # relu of PyTorch <= 1.8 (relu_ -> clamp_min_ -> clamp_min.out)
    "aten::clamp_min_": 1,
    "aten::clamp_max": 1,
    "aten::clamp_max_": 1,
    "aten::clamp": 2,
    "aten::clamp_": 2,
    "aten::hardtanh": 2,
    "aten::hardtanh_": 2,
    "aten::threshold": 1,
    "aten::threshold_": 1,
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
# arguments of the functional form; a tensor past them is the `out=` of the .out overload (clamp_min_
# calls clamp_min.out(self, min, out=self)), written once and not read
_EW_ARITY = {"aten::clamp_min": 2, "aten::clamp_max": 2, "aten::clamp": 3}
# normalisation: op -> (FLOPs per element, passes over the big tensor: reads + writes at minimum)
# fused kernels of the serving and kernel libraries (vLLM csrc/torch_bindings.cpp, sgl-kernel, aiter):
# op -> (family, FLOPs per element of the largest tensor, times each tensor argument is moved, in order:
# 1 read or written, 2 read and written in place). Each argument is moved once per call: the kernels are
# single-pass, so the bytes are exact up to cache hits. An op whose arguments do not match is not modelled.
_FUSED = {
    "_C::rms_norm": ("normalization", 4, (1, 1, 1)),  # (out, input, weight, epsilon)
    "aiter::rmsnorm": ("normalization", 4, (1, 1, 1)),
    "sgl_kernel::rmsnorm": ("normalization", 4, (1, 1, 1)),
    "_C::fused_add_rms_norm": ("normalization", 5, (2, 2, 1)),  # (input, residual, weight, eps): in place
    "sgl_kernel::fused_add_rmsnorm": ("normalization", 5, (2, 2, 1)),
    "aiter::add_rmsnorm": ("normalization", 5, (1, 1, 1, 1, 1)),  # (out, input, residual_in, residual_out, weight)
    "_C::silu_and_mul": ("elementwise", 5, (1, 1)),  # (out [T, I], input [T, 2I])
    "sgl_kernel::silu_and_mul": ("elementwise", 5, (1, 1)),
    "_C::gelu_and_mul": ("elementwise", 9, (1, 1)),
    "sgl_kernel::gelu_and_mul": ("elementwise", 9, (1, 1)),
    "_C::static_scaled_fp8_quant": ("elementwise", 2, (1, 1, 1)),  # (out, input, scale)
}
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


def op_work(op: str, dims, types, conv_geo: dict | None = None) -> Work | None:
    """FLOPs and bytes of one call of `op` from its Input Dims and Input type, or None when the op is
    not modelled or its arguments do not have the documented shapes."""
    try:
        return _work(op, dims, types, conv_geo or {})
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


def _work(op: str, dims, types, geo: dict) -> Work | None:
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
    if op in _CONV_ALL:
        return _conv(op, ts, geo)
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
        shape = _shape(ts)
        arity = _EW_ARITY.get(op)
        if arity is not None and len(dims) > arity:  # .out overload: the read tensors are before `out`
            ts = _tensors(dims[:arity], types[:arity]) or ts
        if op in _WRITE_ONLY:
            byts = float(_numel(ts[0][0]) * ts[0][2])
        elif op == "aten::copy_":  # (dst, src): src read, dst written
            byts = float(sum(_numel(d) * e for d, _, e in ts[:2]))
        else:  # inputs read once, the result written once
            byts = float(sum(_numel(d) * e for d, _, e in ts) + n * ts[0][2])
        return Work(ELEMENTWISE, float(_EW[op] * n), byts, dt, {}, shape)
    if op in _FUSED:
        family, per, moves = _FUSED[op]
        if len(ts) != len(moves):
            return None
        byts = float(sum(m * _numel(d) * e for m, (d, _, e) in zip(moves, ts)))
        big, dt, _ = max(ts, key=lambda t: _numel(t[0]))
        fam = NORM if family == "normalization" else ELEMENTWISE
        return Work(fam, float(per * _numel(big)), byts, dt, {}, _shape(ts), "fused kernel: each argument moved once")
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


def _conv(op: str, ts, geo: dict) -> Work | None:
    """A convolution call from the tensors its Input Dims carry, completed from the trace's other
    convolution calls (`conv_geometry`) where this one lacks a size: every output element is a dot
    product of C/g x prod(R) terms, so FLOPs = 2 N K prod(P) C/g prod(R) per pass."""
    go = x = w = None
    if op == _CONV_BWD:  # (grad_out [N,K,*P], input [N,C,*S], weight [K,C/g,*R], ...)
        if len(ts) < 3:
            return None
        (go, dt, es), (x, _, _), (w, _, _) = ts[:3]
    elif op in _CONV_BWD_XGW:  # (input, grad_out, weight, ...)
        if len(ts) < 3:
            return None
        (x, dt, es), (go, _, _), (w, _, _) = ts[:3]
    elif op in _CONV_BWD_INPUT:  # (input_size: a list, grad_out, weight, ...): computes grad_input
        if len(ts) < 2:
            return None
        (go, dt, es), (w, _, _) = ts[:2]
        x = _list(geo.get("x", {}).get((tuple(go), tuple(w))))
    elif op in _CONV_BWD_WEIGHT:  # (weight_size: a list, grad_out, input, ...): computes grad_weight
        if len(ts) < 2:
            return None
        (go, dt, es), (x, _, _) = ts[:2]
        w = _list(geo.get("w", {}).get((tuple(go), tuple(x))))
    else:  # forward (input [N,C,*S], weight [K,C/g,*R], bias, ...)
        if len(ts) < 2:
            return None
        (x, dt, es), (w, _, _) = ts[:2]
        p = geo.get("go", {}).get((tuple(x), tuple(w)))
        if p is not None:
            go = [x[0], w[0], *p]
    known = [t for t in (go, x, w) if t is not None]
    if len(known[0]) < 3 or any(len(t) != len(known[0]) for t in known):
        return None
    n = (go or x)[0]
    k = go[1] if go is not None else w[0]
    if w is not None and go is not None and w[0] != go[1]:
        return None
    c = x[1] if x is not None else None
    cg = w[1] if w is not None else None
    if min(v for v in (n, k, c, cg) if v is not None) <= 0 or (c is not None and cg is not None and c % cg):
        return None
    n_tensors = 3 if op == _CONV_BWD or op in _CONV_BWD_XGW else 2
    shape = _shape(ts[:n_tensors])
    dims = {"N": n, "K": k}
    if c is not None:
        dims["C"] = c
    if c is not None and cg is not None:
        dims["groups"] = c // cg
    if w is not None:
        dims["kernel"] = _fmt(w[2:])
    if x is not None:
        dims["input"] = _fmt(x[2:])
    if go is None or x is None or w is None:
        # the output size needs stride and padding, which Input Dims does not carry; only another call
        # of the same layer that does carry it (a backward call with the output gradient) tells it
        missing = "output size" if go is None else ("input size" if x is None else "kernel size")
        return Work(
            CONV,
            float("nan"),
            float("nan"),
            dt,
            dims,
            shape,
            f"{missing} unknown (stride/padding not in Input Dims, no other call of this layer carries it)",
        )
    dims["output"] = _fmt(go[2:])
    flops = 2.0 * n * k * math.prod(go[2:]) * cg * math.prod(w[2:])
    io = _numel(x) + _numel(w) + _numel(go)
    if op == _CONV_BWD or op in _CONV_BWD_XGW:  # grad_input and grad_weight (output_mask is not in Input Dims)
        return Work(
            CONV, 2 * flops, float(es) * 2 * io, dt, dims, shape, "grad_input and grad_weight both assumed computed"
        )
    # forward: reads x and w, writes the output; grad_input: reads grad_out and w, writes grad_input;
    # grad_weight: reads grad_out and x, writes grad_weight. Each pass moves the three tensors once.
    return Work(CONV, flops, float(es) * io, dt, dims, shape)


def _list(t) -> list | None:
    return list(t) if t is not None else None


def conv_geometry(names, dims_list) -> dict:
    """The (input, weight, output) sizes of each convolution layer the trace shows, joined from its calls:
    a backward call that carries all three (convolution_backward, cudnn/miopen/mkldnn_convolution_backward)
    gives them whole; otherwise the forward's (input, weight), grad_input's (grad_out, weight) and
    grad_weight's (grad_out, input) pairs of one layer are joined on the tensors they share, where the join
    is unique (a weight shape used at two resolutions stays unknown). Returns {"go": {(x, w): output
    spatial}, "x": {(go, w): x}, "w": {(go, x): w}}, the lookups `op_work` needs."""
    triples: set = set()
    fwd: set = set()  # (x, w)
    b_in: set = set()  # (go, w)
    b_wt: set = set()  # (go, x)

    def ok(*ts) -> bool:
        return all(_is_dims(t) and len(t) >= 3 and len(t) == len(ts[0]) for t in ts)

    for name, dims in zip(names, dims_list):
        if name not in _CONV_ALL or not isinstance(dims, list):
            continue
        if name == _CONV_BWD or name in _CONV_BWD_XGW:
            if len(dims) < 3:
                continue
            a, b, c = dims[0], dims[1], dims[2]
            go, x, w = (a, b, c) if name == _CONV_BWD else (b, a, c)
            if ok(go, x, w) and go[0] == x[0] and go[1] == w[0]:
                triples.add((tuple(x), tuple(w), tuple(go)))
        elif len(dims) >= 3 and name in (_CONV_BWD_INPUT | _CONV_BWD_WEIGHT):
            if ok(dims[1], dims[2]) and dims[1][0] == (dims[2][0] if name in _CONV_BWD_WEIGHT else dims[1][0]):
                (b_in if name in _CONV_BWD_INPUT else b_wt).add((tuple(dims[1]), tuple(dims[2])))
        elif len(dims) >= 2 and ok(dims[0], dims[1]):
            fwd.add((tuple(dims[0]), tuple(dims[1])))
    # joins: a layer (x, w, go) is seen as fwd (x, w), b_in (go, w) and b_wt (go, x)
    for x, w in fwd:
        gos = {go for go, w2 in b_in if w2 == w and go[0] == x[0]} & {go for go, x2 in b_wt if x2 == x}
        if len(gos) == 1:
            triples.add((x, w, gos.pop()))
    for go, w in b_in:
        xs = {x for x, w2 in fwd if w2 == w and x[0] == go[0]} & {x for go2, x in b_wt if go2 == go}
        if len(xs) == 1:
            triples.add((xs.pop(), w, go))
    for go, x in b_wt:
        ws = {w for x2, w in fwd if x2 == x and w[0] == go[1]} & {w for go2, w in b_in if go2 == go}
        if len(ws) == 1:
            triples.add((x, ws.pop(), go))
    geo: dict = {"go": {}, "x": {}, "w": {}}
    for key, val, slot in (((0, 1), 2, "go"), ((2, 1), 0, "x"), ((2, 0), 1, "w")):
        seen: dict = {}
        for t in triples:
            seen.setdefault((t[key[0]], t[key[1]]), set()).add(t[val])
        geo[slot] = {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}
    geo["go"] = {k: v[2:] for k, v in geo["go"].items()}
    return geo


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
