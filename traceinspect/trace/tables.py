"""Decoded events -> typed columnar tables (pandas), with units normalised once.

Owns category normalisation across Kineto eras and the kernel -> launch -> CPU-op links.
Must not analyse: no busy/idle, no steps (timeline.py), no findings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .load import Event

# Category names across Kineto eras (SIGNATURES.md 1.3) -> one canonical kind.
CATEGORY = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "annotation", "user": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "runtime",
    "hip_runtime": "runtime", "mtia_runtime": "runtime", "xpu_runtime": "runtime",
    "privateuse1_runtime": "runtime", "privateuse1_driver": "runtime", "xpu_driver": "runtime",
    "python_function": "python", "python": "python",
    "cuda_sync": "sync", "xpu_sync": "sync",
    "trace": "span",
    "ac2g": "flow", "async": "flow", "async_cpu_to_gpu": "flow", "async_gpu": "flow",
    "fwdbwd": "flow_fwdbwd", "forward_backward": "flow_fwdbwd", "fwd_bwd": "flow_fwdbwd",
    "cpu_instant_event": "instant",
    "overhead": "overhead",
}

_MEMCPY_NAME = re.compile(r"Memcpy (\w+) \(([\w ]+) -> ([\w ]+)\)")


def _names(values: list[str]) -> pd.Categorical:
    return pd.Categorical(values)


def _ints(values, default=-1) -> np.ndarray:
    return np.array([default if v is None else v for v in values], dtype=np.int64)


def _ext_id(a) -> int:
    if a is None:
        return -1
    v = a.external_id if a.external_id is not None else a.external_id_old
    return -1 if v is None else v


@dataclass
class Tables:
    kernels: pd.DataFrame
    memcpy: pd.DataFrame      # memcpy and memset; `is_memset`
    runtime: pd.DataFrame
    cpu_ops: pd.DataFrame     # cpu_op and CPU user annotations; `is_annotation`
    gpu_annotations: pd.DataFrame
    python: pd.DataFrame
    sync: pd.DataFrame
    memory: pd.DataFrame
    flows: pd.DataFrame
    thread_names: dict
    origin_us: float          # absolute ts of the earliest event; every *_us column is relative to it
    n_events: int
    warnings: list


def _gpu_device(e: Event) -> int:
    a = e.args
    if a is not None and a.device is not None:
        return a.device
    return e.pid if isinstance(e.pid, int) else 0


def _stream(e: Event) -> int:
    a = e.args
    if a is not None and a.stream is not None:
        return a.stream
    t = e.tid
    if isinstance(t, int):
        return t
    m = re.search(r"(\d+)", t)
    return int(m.group(1)) if m else 0


def _tid(t) -> int:
    if isinstance(t, int):
        return t
    try:
        return int(t)
    except ValueError:
        m = re.search(r"(\d+)", t)
        return int(m.group(1)) if m else -1


def _pid(p) -> int:
    return p if isinstance(p, int) else _tid(p)


def build_tables(events: list[Event]) -> Tables:
    warnings: list[str] = []
    buckets: dict[str, list[Event]] = {k: [] for k in set(CATEGORY.values())}
    thread_names: dict = {}
    unknown_cats: dict[str, int] = {}
    no_dur = 0
    neg_dur = 0
    for e in events:
        ph = e.ph
        if ph == "X":
            kind = CATEGORY.get(e.cat.lower())
            if kind is None:
                if e.cat:
                    unknown_cats[e.cat] = unknown_cats.get(e.cat, 0) + 1
                continue
            if e.dur is None:
                no_dur += 1
                continue
            if e.dur < 0:
                neg_dur += 1
                continue
            buckets[kind].append(e)
        elif ph in ("s", "f"):
            kind = CATEGORY.get(e.cat.lower())
            if kind == "flow":
                buckets["flow"].append(e)
        elif ph == "i" or ph == "I":
            if e.name == "[memory]":
                buckets["instant"].append(e)
        elif ph == "M":
            if e.name == "thread_name" and e.args is not None and e.args.name:
                thread_names[(_pid(e.pid), _tid(e.tid))] = e.args.name
    if no_dur:
        warnings.append(f"{no_dur} complete events had no 'dur' and were left out of the timeline")
    if neg_dur:
        warnings.append(f"{neg_dur} events had a negative duration and were left out of the timeline")

    timed = [e.ts for k in ("kernel", "memcpy", "memset", "cpu_op", "annotation", "runtime",
                            "gpu_annotation", "python") for e in buckets[k]]
    origin = float(min(timed)) if timed else 0.0

    def base(evs: list[Event]) -> dict:
        ts = np.array([e.ts for e in evs], dtype=np.float64) - origin
        dur = np.array([e.dur for e in evs], dtype=np.float64)
        return {"ts_us": ts, "dur_us": dur, "end_us": ts + dur,
                "name": _names([e.name for e in evs])}

    # --- GPU activity -----------------------------------------------------------------------
    kev = buckets["kernel"]
    kernels = pd.DataFrame(base(kev))
    kernels["device"] = np.array([_gpu_device(e) for e in kev], dtype=np.int64)
    kernels["stream"] = np.array([_stream(e) for e in kev], dtype=np.int64)
    kernels["correlation"] = _ints([e.args.correlation if e.args else None for e in kev])
    kernels["external_id"] = np.array([_ext_id(e.args) for e in kev], dtype=np.int64)
    kernels["grid_blocks"] = np.array([_prod(e.args.grid) if e.args else 0 for e in kev], dtype=np.int64)
    kernels["block_threads"] = np.array([_prod(e.args.block) if e.args else 0 for e in kev], dtype=np.int64)
    kernels["collective"] = [e.args.collective if e.args else None for e in kev]

    mev = buckets["memcpy"] + buckets["memset"]
    memcpy = pd.DataFrame(base(mev))
    memcpy["device"] = np.array([_gpu_device(e) for e in mev], dtype=np.int64)
    memcpy["stream"] = np.array([_stream(e) for e in mev], dtype=np.int64)
    memcpy["correlation"] = _ints([e.args.correlation if e.args else None for e in mev])
    memcpy["external_id"] = np.array([_ext_id(e.args) for e in mev], dtype=np.int64)
    memcpy["bytes"] = np.array([(e.args.nbytes or 0) if e.args else 0 for e in mev], dtype=np.float64)
    memcpy["is_memset"] = np.array([i >= len(buckets["memcpy"]) for i in range(len(mev))], dtype=bool)
    kinds, srcs, dsts = [], [], []
    for e in mev:
        m = _MEMCPY_NAME.match(e.name)
        if m:
            kinds.append(m.group(1)); srcs.append(m.group(2)); dsts.append(m.group(3))
        else:
            kinds.append("memset" if e.name.startswith("Memset") else "unknown"); srcs.append(""); dsts.append("")
    memcpy["kind"] = pd.Categorical(kinds)
    memcpy["src_kind"] = pd.Categorical(srcs)
    memcpy["dst_kind"] = pd.Categorical(dsts)

    gev = buckets["gpu_annotation"]
    gpu_annotations = pd.DataFrame(base(gev))
    gpu_annotations["device"] = np.array([_gpu_device(e) for e in gev], dtype=np.int64)

    # --- host side ----------------------------------------------------------------------------
    rev = buckets["runtime"]
    runtime = pd.DataFrame(base(rev))
    runtime["pid"] = np.array([_pid(e.pid) for e in rev], dtype=np.int64)
    runtime["tid"] = np.array([_tid(e.tid) for e in rev], dtype=np.int64)
    runtime["correlation"] = _ints([e.args.correlation if e.args else None for e in rev])
    runtime["external_id"] = np.array([_ext_id(e.args) for e in rev], dtype=np.int64)
    runtime["cbid"] = _ints([(e.args.cbid if e.args.cbid is not None else e.args.cid) if e.args else None for e in rev])

    cev = buckets["cpu_op"] + buckets["annotation"]
    cpu_ops = pd.DataFrame(base(cev))
    cpu_ops["pid"] = np.array([_pid(e.pid) for e in cev], dtype=np.int64)
    cpu_ops["tid"] = np.array([_tid(e.tid) for e in cev], dtype=np.int64)
    cpu_ops["external_id"] = np.array([_ext_id(e.args) for e in cev], dtype=np.int64)
    cpu_ops["is_annotation"] = np.array([i >= len(buckets["cpu_op"]) for i in range(len(cev))], dtype=bool)
    # shapes stay undecoded (msgspec.Raw); trace.shapes decodes them on demand
    cpu_ops["input_dims_raw"] = pd.Series([_dims_raw(e.args) for e in cev], dtype=object)
    cpu_ops["input_type_raw"] = pd.Series([e.args.input_type if e.args else None for e in cev], dtype=object)

    pev = buckets["python"]
    python = pd.DataFrame(base(pev))
    python["pid"] = np.array([_pid(e.pid) for e in pev], dtype=np.int64)
    python["tid"] = np.array([_tid(e.tid) for e in pev], dtype=np.int64)

    sev = buckets["sync"]
    sync = pd.DataFrame(base(sev))
    sync["device"] = np.array([_gpu_device(e) for e in sev], dtype=np.int64)

    iev = buckets["instant"]
    memory = pd.DataFrame({
        "ts_us": np.array([e.ts for e in iev], dtype=np.float64) - origin,
        "bytes": np.array([(e.args.mem_bytes or 0) if e.args else 0 for e in iev], dtype=np.float64),
        "total_allocated_bytes": np.array([(e.args.total_allocated or 0) if e.args else 0 for e in iev], dtype=np.float64),
        "total_reserved_bytes": np.array([(e.args.total_reserved or 0) if e.args else 0 for e in iev], dtype=np.float64),
        "device_type": _ints([e.args.device_type if e.args else None for e in iev]),
    })

    fev = buckets["flow"]
    flows = pd.DataFrame({
        "id": [e.id for e in fev],
        "ph": pd.Categorical([e.ph for e in fev]),
        "ts_us": np.array([e.ts for e in fev], dtype=np.float64) - origin,
    })

    if unknown_cats:
        top = ", ".join(f"{k} ({v})" for k, v in sorted(unknown_cats.items(), key=lambda kv: -kv[1])[:5])
        warnings.append(f"events of unrecognised categories were ignored: {top}")

    kernels, memcpy, runtime, cpu_ops, gpu_annotations, python, sync = (
        df.sort_values("ts_us", kind="stable").reset_index(drop=True)
        for df in (kernels, memcpy, runtime, cpu_ops, gpu_annotations, python, sync))

    _link(kernels, runtime, cpu_ops)
    _link(memcpy, runtime, cpu_ops)
    return Tables(kernels=kernels, memcpy=memcpy, runtime=runtime, cpu_ops=cpu_ops,
                  gpu_annotations=gpu_annotations, python=python, sync=sync, memory=memory,
                  flows=flows, thread_names=thread_names, origin_us=origin, n_events=len(events),
                  warnings=warnings)


def _prod(v) -> int:
    if not v:
        return 0
    p = 1
    for x in v:
        try:
            p *= int(x)
        except (TypeError, ValueError):
            return 0
    return p


def _dims_raw(a):
    if a is None:
        return None
    if len(a.input_dims):
        return a.input_dims
    if len(a.input_dims_old):
        return a.input_dims_old
    return None


def _link(gpu: pd.DataFrame, runtime: pd.DataFrame, cpu_ops: pd.DataFrame) -> None:
    """Add launch_* columns (the runtime call with the same correlation id) and op_* columns
    (the innermost CPU op whose External id the GPU event or its launch carries)."""
    n = len(gpu)
    launch_idx = np.full(n, -1, dtype=np.int64)
    if n and len(runtime):
        rt = runtime[runtime["correlation"] >= 0]
        m = pd.Series(rt.index.values, index=rt["correlation"].values)
        m = m[~m.index.duplicated(keep="first")]
        launch_idx = m.reindex(gpu["correlation"].values).fillna(-1).to_numpy(dtype=np.int64)
    ok = launch_idx >= 0
    gpu["launch_idx"] = launch_idx
    gpu["launch_ts_us"] = np.where(ok, runtime["ts_us"].to_numpy()[np.maximum(launch_idx, 0)] if len(runtime) else np.nan, np.nan)
    gpu["launch_dur_us"] = np.where(ok, runtime["dur_us"].to_numpy()[np.maximum(launch_idx, 0)] if len(runtime) else np.nan, np.nan)
    ext = gpu["external_id"].to_numpy().copy()
    if len(runtime):
        rext = runtime["external_id"].to_numpy()[np.maximum(launch_idx, 0)]
        ext = np.where((ext < 0) & ok, rext, ext)
    gpu["external_id"] = ext
    op_idx = np.full(n, -1, dtype=np.int64)
    if n and len(cpu_ops):
        ops = cpu_ops[(cpu_ops["external_id"] >= 0) & ~cpu_ops["is_annotation"]]
        m = pd.Series(ops.index.values, index=ops["external_id"].values)
        m = m[~m.index.duplicated(keep="last")]
        op_idx = m.reindex(ext).fillna(-1).to_numpy(dtype=np.int64)
    gpu["op_idx"] = op_idx
    names = cpu_ops["name"].astype(object).to_numpy() if len(cpu_ops) else np.array([], dtype=object)
    gpu["op_name"] = pd.Categorical([names[i] if i >= 0 else "" for i in op_idx]) if n else pd.Categorical([])
