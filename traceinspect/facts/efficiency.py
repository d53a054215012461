"""The per-op, per-shape efficiency table: each (op, input shapes, input types) group of the analysed
steps with its FLOPs and bytes (trace/roofline.py), achieved TFLOP/s and TB/s, and share of the roofline.

Shared by the far-from-roofline detector and the report's `efficiency` section. Computes, never judges.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pandas as pd

from ..sections import Efficiency, Peaks, ShapeRow, py
from ..trace import roofline as rl
from ..trace.timeline import is_comm_kernel
from . import kernels as K
from .steps import step_kernels


def shape_table(trace) -> list[ShapeRow]:
    """Every modelled op group of the analysed steps on the analysed device, longest GPU time first.
    Ops the model does not know are left out (coverage() says how much kernel time that is)."""
    return trace.memo("efficiency shape table", lambda: _table(trace))


def coverage(trace) -> dict:
    """GPU kernel time per step (communication kernels excluded) and the share the table models."""
    k = compute_kernels(trace)
    n = max(len(trace.steps), 1)
    total = float(k["dur_us"].sum()) if len(k) else 0.0
    modelled = sum(r.gpu_us_per_step for r in shape_table(trace) if r.share_of_peak is not None) * n
    return {"kernel_us_per_step": total / n, "modelled_frac": float(min(1.0, modelled / total)) if total else 0.0}


def unmodelled(trace, top: int = 3) -> list[tuple[str, float, bool]]:
    """The ops whose kernels the table has no FLOPs and bytes for, by their kernel time per step, longest
    first: what "only N% modelled" is made of, each with whether its calls recorded shapes. Kernels
    launched outside any recorded op are one entry."""
    k = compute_kernels(trace)
    if not len(k):
        return []
    n = max(len(trace.steps), 1)
    idx = k["op_idx"].to_numpy()
    ops = trace.cpu_ops
    names = ops["name"].to_numpy().astype(str)
    shaped = ops["input_dims_raw"].notna().to_numpy()
    op = np.array([names[i] if i >= 0 else NO_OP for i in idx], dtype=object)
    has = np.array([bool(shaped[i]) if i >= 0 else False for i in idx])
    per = k["dur_us"].groupby(op).sum() / n
    any_shape = pd.Series(has).groupby(op).any()
    for r in shape_table(trace):
        if r.share_of_peak is not None and r.op in per.index:
            per[r.op] -= r.gpu_us_per_step
    per = per[per > 1e-3 * max(float(per.sum()), 1e-9)].sort_values(ascending=False)
    return [(str(name), float(us), bool(any_shape[name])) for name, us in per.head(top).items()]


NO_OP = "(no recorded op)"


def shapes_advice(trace) -> str:
    """What would let the model cover more kernel time, from the trace's own profiler settings: capture
    with record_shapes where it was not, else the ops the model has no formula for (their kernel time),
    apart from those whose calls recorded no shapes."""
    if not trace.meta.profiler.get("record_shapes"):
        return "capture with record_shapes=True (and with_flops=True)"
    missing = unmodelled(trace)
    if not missing:
        return "the shapes are recorded; no op is left without a model"
    parts = []
    no_model = [f"{name} {_us(us)}/step" for name, us, shaped in missing if shaped and name != NO_OP]
    no_shapes = [f"{name} {_us(us)}/step" for name, us, shaped in missing if not shaped and name != NO_OP]
    unlinked = [us for name, us, _ in missing if name == NO_OP]
    if no_model:
        parts.append(f"the shapes are recorded, the model has no FLOPs and bytes for: {', '.join(no_model)}")
    if no_shapes:
        parts.append(f"record_shapes is on but these ops recorded no shapes: {', '.join(no_shapes)}")
    if unlinked:
        parts.append(f"{_us(unlinked[0])}/step of kernels are linked to no recorded op (no shapes to read)")
    return "; ".join(parts)


def _us(us: float) -> str:
    return f"{us / 1e3:.1f} ms" if us >= 1e3 else f"{us:.0f} us"


def section(trace, top: int = 25) -> Efficiency:
    """The report's `efficiency` field: the peaks used, the coverage and the top rows by GPU time."""
    if not trace.has_gpu or not len(trace.kernels):
        return Efficiency()
    rows = shape_table(trace)
    dev = trace.device
    p = dev.peaks if dev is not None else None
    peaks = (
        None
        if p is None
        else Peaks(
            name=p.name,
            source=p.source,
            approximate=bool(p.approximate),
            mem_tbps=p.mem_gbps / 1e3,
            fp32_tflops=py(p.fp32_tflops),
            tf32_tflops=py(p.tf32_tflops),
            half_tflops=py(p.half_tflops),
            fp8_tflops=py(p.fp8_tflops),
            bf16=bool(p.bf16),
        )
    )
    cov = coverage(trace)
    return Efficiency(
        peaks=peaks,
        kernel_us_per_step=cov["kernel_us_per_step"],
        modelled_frac=cov["modelled_frac"],
        rows_total=len(rows),
        rows=[reported(r) for r in rows[:top]],
    )


def reported(r: ShapeRow) -> ShapeRow:
    """A row as the report states it: each number to 6 significant digits (a non-finite one None); the
    table itself keeps full precision for the detector and the speed of light."""
    out = {}
    for k in ShapeRow.__struct_fields__:
        v = getattr(r, k)
        if isinstance(v, float):
            v = float(f"{v:.6g}") if math.isfinite(v) else None
        out[k] = v
    out["dims"] = msgspec.to_builtins(r.dims, enc_hook=lambda o: o.item())
    return ShapeRow(**out)


def compute_kernels(trace) -> pd.DataFrame:
    """The kernels the table and coverage() count: the primary device's in the analysed steps,
    communication left out (computed once per trace and step selection). Read-only."""

    def compute():
        k = trace.kernels
        if not len(k) or not len(trace.steps):
            return k.iloc[:0]
        k = step_kernels(trace)
        return k[~is_comm_kernel(k["name"])]

    return trace.memo("facts: compute kernels in steps", compute)


def _table(trace) -> list[ShapeRow]:
    k = compute_kernels(trace)
    k = k[k["op_idx"].to_numpy() >= 0]
    if not len(k):
        return []
    n = max(len(trace.steps), 1)
    ops = trace.cpu_ops
    per_op = k.groupby("op_idx")["dur_us"].sum()
    idx = per_op.index.to_numpy()
    op_names = _categorical(ops["name"])  # ops grouped by their name's code, the name read once per group
    inst = pd.DataFrame(
        {
            "op": np.asarray(op_names.codes, dtype=np.int64)[idx],
            "dims": _bytes_or_empty(ops["input_dims_raw"].to_numpy()[idx]),
            "types": _bytes_or_empty(ops["input_type_raw"].to_numpy()[idx]),
            "dur": per_op.to_numpy(),
        },
        index=idx,
    )
    grp = inst.groupby(["op", "dims", "types"], sort=False)
    inst["grp"] = grp.ngroup()
    agg = grp["dur"].agg(["sum", "count"]).reset_index()
    # the longest-running kernel of each group: its name tells the math precision (TF32 or not); kernels
    # grouped by their name's category code, the name read once per group
    names = _categorical(k["name"])
    kg = pd.DataFrame(
        {
            "grp": inst["grp"].reindex(k["op_idx"].to_numpy()).to_numpy(),
            "name": np.asarray(names.codes, dtype=np.int64),
            "dur": k["dur_us"].to_numpy(),
        }
    )
    kk = kg.groupby(["grp", "name"], sort=False)["dur"].sum()
    top_kernel = {g: _name(names, t[1]) for g, t in kk.groupby(level=0).idxmax().items()}
    decoded = [trace.shapes(d) if d else None for d in agg["dims"]]
    conv_geo = _conv_geometry(trace)
    dev = trace.device
    peaks = dev.peaks if dev is not None else None
    rows = []
    for i, r in enumerate(agg.itertuples(index=False)):
        types = trace.shapes(r.types) if r.types else None
        op = _name(op_names, r.op)
        w = rl.op_work(op, decoded[i], types, conv_geo)
        if w is None or not r.sum > 0:
            continue
        kname = top_kernel.get(i, "")
        rows.append(_row(op, w, float(r.sum), int(r.count), n, peaks, kname))
    rows.sort(key=lambda x: -x.gpu_us_per_step)
    return rows


def _categorical(names: pd.Series) -> pd.Categorical:
    return names.array if isinstance(names.dtype, pd.CategoricalDtype) else pd.Categorical(names)


def _name(names: pd.Categorical, code: int) -> str:
    """The name of category `code` as str() of the column's value would give it ("nan" for a missing one)."""
    return str(names.categories[code]) if code >= 0 else "nan"


def _bytes_or_empty(a: np.ndarray) -> np.ndarray:
    """An object array of raw bytes with None read as b"" (a copy)."""
    a = a.copy()
    a[np.equal(a, None)] = b""
    return a


def _conv_geometry(trace) -> dict:
    """The convolution layers' sizes from every convolution call of the trace, those that launch no kernel
    of their own included (PyTorch <= 1.10's cudnn_convolution_backward carries all three sizes; its
    children launch the kernels)."""
    ops = trace.cpu_ops
    if not len(ops):
        return {}
    sel = ops.loc[ops["name"].isin(rl.CONV_OPS).to_numpy(), ["name", "input_dims_raw"]].dropna()
    if not len(sel):
        return {}
    sel = sel.drop_duplicates()
    return rl.conv_geometry(list(sel["name"].astype(str)), [trace.shapes(d) for d in sel["input_dims_raw"]])


def _row(op: str, w: rl.Work, dur_us: float, count: int, n: int, peaks, kernel: str) -> ShapeRow:
    base = dict(
        op=op,
        family=w.family,
        shape=w.shape,
        dtype=w.dtype,
        dims=w.dims,
        calls_per_step=count / n,
        gpu_us_per_step=dur_us / n,
        us_per_call=dur_us / count,
        kernel=kernel,
        note=w.note,
    )
    if not (math.isfinite(w.flops) and math.isfinite(w.bytes)):
        return ShapeRow(
            **base,
            gflops_per_call=None,
            mbytes_per_call=None,
            tflops=None,
            tbps=None,
            intensity=None,
            peak_tflops=None,
            peak_tbps=None,
            bound=None,
            share_of_peak=None,
            roofline_us_per_step=None,
            peak_unit=None,
        )
    tflops = w.flops * count / dur_us / 1e6  # FLOP per us / 1e6 = TFLOP/s
    tbps = w.bytes * count / dur_us / 1e6  # byte per us / 1e6 = TB/s
    intensity = w.flops / w.bytes if w.bytes > 0 else None
    precision = K.classify_name(kernel).precision if kernel else ""
    peak_f = rl.roof(peaks, w.family, w.dtype, precision)
    peak_b = peaks.mem_gbps / 1e3 if peaks is not None and peaks.mem_gbps else None
    bound = share = ideal = None
    if peak_f and peak_b:
        t_compute = w.flops / (peak_f * 1e6)  # us per call at the compute roof
        t_memory = w.bytes / (peak_b * 1e6)  # us per call at the memory roof
        bound = "compute" if t_compute >= t_memory else "memory"
        ideal = max(t_compute, t_memory) * count / n
        share = ideal * n / dur_us
        if share > 1 and w.family == rl.CONV:  # above the roof: the kernel did fewer multiplies than counted
            base["note"] = "; ".join(
                filter(
                    None,
                    (w.note, "above the direct-count roof: a fast algorithm (Winograd or FFT) does fewer multiplies"),
                )
            )
    return ShapeRow(
        **base,
        gflops_per_call=w.flops / 1e9,
        mbytes_per_call=w.bytes / 1e6,
        tflops=tflops,
        tbps=tbps,
        intensity=intensity,
        peak_tflops=peak_f,
        peak_unit=rl.roof_unit(peaks, w.family, w.dtype, precision) or None,
        peak_tbps=peak_b,
        bound=bound,
        share_of_peak=share,
        roofline_us_per_step=ideal,
    )
