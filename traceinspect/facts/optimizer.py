"""Optimizer steps: one row per outermost `Optimizer.step#...` span of the analysed steps, with the
kernels it launched and its implementation (fused, foreach, for-loop, or on the CPU)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace import intervals as iv
from ..trace.tables import name_flags
from .device import primary_kernels
from .steps import in_steps

OPT_PREFIX = "Optimizer.step#"
# fused implementations: torch fused=True, apex / DeepSpeed FusedAdam, bitsandbytes 8-bit optimizers
_FUSED_OP = re.compile(r"^aten::_fused_")
_FUSED_KERNEL = re.compile(
    r"FusedAdamMathFunctor|FusedSgdMathFunctor|FusedOptimizerTensorListMetadata|"
    r"\bAdamFunctor\b|LAMBStage|kOptimizer32bit|kOptimizerStatic8bit|fused_adam",
    re.IGNORECASE,
)
_FUSED_CLASS = re.compile(r"^Fused|Fused(Adam|Lamb|SGD|Adagrad)")
_CPU_CLASS = re.compile(r"CPUAdam|CPUAdagrad|CPULion|DeepSpeedCPU")
_FOREACH_OP = re.compile(r"^aten::_foreach_")


def _class_of(span_name: str) -> str:
    """'Optimizer.step#AdamW.step' -> 'AdamW'."""
    rest = span_name[len(OPT_PREFIX) :]
    return rest.rsplit(".step", 1)[0] if rest.endswith(".step") else rest


def optimizer_steps(trace) -> pd.DataFrame:
    """One row per outermost `Optimizer.step#...` span in the analysed steps, with the kernels it
    launched: ts_us, end_us, window_end_us (last of its kernels done), tid, opt_class, impl
    ("fused" | "foreach" | "for-loop" | "cpu"), n_kernels, kernel_us, busy_us, median_kernel_us."""
    return trace.memo("optimizer_steps", lambda: _optimizer_steps(trace))


def _optimizer_steps(trace) -> pd.DataFrame:
    cols = [
        "ts_us",
        "end_us",
        "window_end_us",
        "tid",
        "name",
        "opt_class",
        "impl",
        "n_kernels",
        "kernel_us",
        "busy_us",
        "median_kernel_us",
    ]
    ops = trace.cpu_ops
    if not len(ops):
        return pd.DataFrame(columns=cols)
    is_opt = name_flags(ops["name"], lambda n: n.startswith(OPT_PREFIX))
    spans = in_steps(ops[is_opt], trace)
    if not len(spans):
        return pd.DataFrame(columns=cols)
    spans = spans.sort_values(["ts_us", "dur_us"], ascending=[True, False])
    # keep outermost spans (a wrapper such as AcceleratedOptimizer.step encloses the real one); the
    # class reported is the innermost, the real optimizer
    kept: list[dict] = []
    for r in spans.itertuples(index=False):
        name = str(r.name)
        outer = next((s for s in kept if s["tid"] == r.tid and s["ts_us"] <= r.ts_us and r.end_us <= s["end_us"]), None)
        if outer is not None:
            outer["opt_class"] = _class_of(name)
            outer["classes"].append(_class_of(name))
            continue
        kept.append(
            {
                "ts_us": float(r.ts_us),
                "end_us": float(r.end_us),
                "tid": int(r.tid),
                "name": name,
                "opt_class": _class_of(name),
                "classes": [_class_of(name)],
            }
        )

    k = primary_kernels(trace)
    rt = trace.runtime
    if len(k) and len(rt):
        li = k["launch_idx"].to_numpy()
        k_tid = np.where(li >= 0, rt["tid"].to_numpy()[np.maximum(li, 0)], -1)
    else:
        k_tid = np.full(len(k), -1)
    order = np.argsort(k["launch_ts_us"].to_numpy(), kind="stable") if len(k) else np.zeros(0, dtype=int)
    l_sorted = k["launch_ts_us"].to_numpy()[order] if len(k) else np.zeros(0)
    fused_kernel = name_flags(k["name"], _FUSED_KERNEL.search) if len(k) else np.zeros(0, dtype=bool)
    op_ts = ops["ts_us"].to_numpy()
    fused_op = name_flags(ops["name"], _FUSED_OP.search)
    foreach_op = name_flags(ops["name"], _FOREACH_OP.search)
    op_tid = ops["tid"].to_numpy()

    k_ts, k_end, k_dur = (k[c].to_numpy() for c in ("ts_us", "end_us", "dur_us"))
    rows = []
    for s in kept:
        a, b = np.searchsorted(l_sorted, [s["ts_us"], s["end_us"]], side="left")
        idx = order[a:b]
        idx = idx[k_tid[idx] == s["tid"]]
        oa, ob = np.searchsorted(op_ts, [s["ts_us"], s["end_us"]], side="left")
        same = op_tid[oa:ob] == s["tid"]
        cls = s["opt_class"]
        if any(_CPU_CLASS.search(c) for c in s["classes"]):
            impl = "cpu"
        elif (
            (fused_op[oa:ob] & same).any()
            or fused_kernel[idx].any()
            or any(_FUSED_CLASS.search(c) for c in s["classes"])
        ):
            impl = "fused"
        elif (foreach_op[oa:ob] & same).any():
            impl = "foreach"
        else:
            impl = "for-loop"
        n = len(idx)
        busy = iv.total(iv.union(k_ts[idx], k_end[idx])) if n else 0.0
        rows.append(
            {
                "ts_us": s["ts_us"],
                "end_us": s["end_us"],
                "window_end_us": max(s["end_us"], float(k_end[idx].max()) if n else 0.0),
                "tid": s["tid"],
                "name": s["name"],
                "opt_class": cls,
                "impl": impl,
                "n_kernels": n,
                "kernel_us": float(k_dur[idx].sum()),
                "busy_us": busy,
                "median_kernel_us": float(np.median(k_dur[idx])) if n else 0.0,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def stepped_optimizer(trace) -> tuple[str, str] | None:
    """The optimizer the trace shows stepped: (class, implementation) of the most frequent
    `Optimizer.step#<Class>.step` span in the analysed steps (implementation as in optimizer_steps),
    or None when no optimizer step is recorded."""
    o = optimizer_steps(trace)
    if not len(o):
        return None
    cls = str(o["opt_class"].mode().iloc[0])
    impl = str(o.loc[o["opt_class"] == cls, "impl"].mode().iloc[0])
    return cls, impl
