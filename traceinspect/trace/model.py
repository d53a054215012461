"""Trace: metadata + tables + derived views (steps, timeline), built once per file.

Owns step detection and device/rank identification. Detectors read a Trace and never mutate it.
"""
from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from ..errors import UsageError
from . import load as _load
from .hardware import Peaks, peaks_for
from .tables import Tables, assemble, extract, name_flags
from .timeline import Timeline, build_timeline

_STEP = re.compile(r"ProfilerStep#[0-9]{1,18}\Z")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?([0-9]{1,9})(?![0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class DeviceInfo:
    id: int
    name: str
    compute_major: int | None
    compute_minor: int | None
    num_sms: int | None
    total_mem_bytes: int | None
    is_rocm: bool
    peaks: Peaks | None

    @property
    def arch(self) -> str:
        if self.is_rocm:
            return "ROCm"
        if self.compute_major is None:
            return "unknown"
        return f"sm{self.compute_major}{self.compute_minor or 0}"


@dataclass
class TraceMeta:
    path: str
    file_bytes: int
    json_bytes: int
    n_events: int
    rank: int
    rank_source: str               # "distributedInfo" | "file name" | "default"
    world_size: int | None
    devices: list[DeviceInfo]
    profiler: dict                 # record_shapes, with_stack, profile_memory, ...
    versions: dict                 # cuda runtime/driver, cupti, hip
    run_config: dict | None        # traceinspect.capture metadata, when present
    base_time_ns: int | None
    origin_us: float
    lost_bytes: int = 0
    dropped_events: int = 0


class Trace:
    """One rank's trace, ready for analysis."""

    def __init__(self, meta: TraceMeta, tables: Tables, warnings: list[str]):
        self.meta = meta
        self.tables = tables
        self.warnings = warnings
        self._step_slice: slice | None = None
        self._memo: dict = {}

    def memo(self, key, compute):
        """A derived view shared by detectors (computed once per trace and step selection)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    # --- tables (read-only views) ---------------------------------------------------------------
    kernels = property(lambda self: self.tables.kernels)
    memcpy = property(lambda self: self.tables.memcpy)
    runtime = property(lambda self: self.tables.runtime)
    cpu_ops = property(lambda self: self.tables.cpu_ops)
    python = property(lambda self: self.tables.python)
    gpu_annotations = property(lambda self: self.tables.gpu_annotations)
    sync_events = property(lambda self: self.tables.sync)
    memory = property(lambda self: self.tables.memory)
    flows = property(lambda self: self.tables.flows)

    @property
    def has_gpu(self) -> bool:
        return len(self.kernels) > 0 or len(self.memcpy) > 0

    @property
    def has_cpu(self) -> bool:
        return len(self.cpu_ops) > 0 or len(self.runtime) > 0

    @property
    def is_rocm(self) -> bool:
        if self.meta.versions.get("hip_runtime_version") is not None:
            return True
        rt = self.runtime
        if len(rt):
            cats = pd.Categorical(rt["name"]).categories
            return any(str(c).startswith("hip") for c in cats)
        return any(d.is_rocm for d in self.meta.devices)

    @cached_property
    def device_id(self) -> int | None:
        """The GPU this rank drives: the device with the most kernel time."""
        k = self.kernels
        if len(k):
            return int(k.groupby("device")["dur_us"].sum().idxmax())
        if len(self.memcpy):
            return int(self.memcpy["device"].iloc[0])
        return None

    @cached_property
    def device(self) -> DeviceInfo | None:
        did = self.device_id
        for d in self.meta.devices:
            if d.id == did:
                return d
        if did is None:
            return None
        if self.meta.devices and len(self.meta.devices) == 1:
            return self.meta.devices[0]
        return DeviceInfo(id=did, name="unknown GPU", compute_major=None, compute_minor=None,
                          num_sms=None, total_mem_bytes=None, is_rocm=self.is_rocm, peaks=None)

    # --- steps ------------------------------------------------------------------------------------
    @cached_property
    def all_steps(self) -> tuple[pd.DataFrame, str]:
        return find_steps(self.tables, self.warnings)

    @property
    def step_source(self) -> str:
        return self.all_steps[1]

    @cached_property
    def steps(self) -> pd.DataFrame:
        st = self.all_steps[0]
        if self._step_slice is not None:
            st = st.iloc[self._step_slice].reset_index(drop=True)
        return st

    def select_steps(self, spec: str | None) -> None:
        """--steps A:B: a Python slice over the steps in time order (e.g. '1:' skips the first)."""
        if not spec:
            return
        sl = parse_step_slice(spec)
        n = len(self.all_steps[0])
        if len(range(n)[sl]) == 0:
            raise UsageError(f"--steps {spec!r} selects no step: the trace has {n} steps (0..{n - 1})")
        self._step_slice = sl
        self.__dict__.pop("steps", None)
        self.__dict__.pop("timeline", None)
        self._memo.clear()

    @cached_property
    def timeline(self) -> Timeline:
        return build_timeline(self.tables, self.steps, self.device_id)

    @property
    def window_us(self) -> float:
        return float(self.steps["dur_us"].sum())

    # --- helpers for detectors ----------------------------------------------------------------------
    def shapes(self, raw) -> list | None:
        """Decode one op's `Input Dims` (kept undecoded in the tables)."""
        if raw is None:
            return None
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None

    def track(self, row, kind: str) -> str:
        if kind in ("kernel", "memcpy"):
            return f"GPU {int(row.device)} stream {int(row.stream)}"
        return f"CPU thread {int(row.tid)}"


def parse_step_slice(spec: str) -> slice:
    """--steps: 'N' (one step), 'A:B' or 'A:B:C', a Python slice over the steps in time order.
    Anything else (a zero or non-integer part, more than three parts) is a UsageError."""
    def usage() -> UsageError:
        return UsageError(f"--steps {spec!r}: expected N, A:B or A:B:C with integers and a non-zero C",
                          hint="a Python slice over the steps in time order: '1:' skips the first step, "
                               "'2:5' takes the third to the fifth, '::2' every other one")

    parts: list[int | None] = []
    for p in spec.split(":"):
        p = p.strip()
        # ASCII digits only (int() also takes '١' and '1_000'), and at most 18 of them (int64 range)
        if p and not _SLICE_INT.fullmatch(p):
            raise usage()
        parts.append(int(p) if p else None)
    if len(parts) > 3 or (len(parts) == 3 and parts[2] == 0):
        raise usage()
    if len(parts) == 1:
        if parts[0] is None:
            raise usage()
        parts = [parts[0], (parts[0] + 1) if parts[0] != -1 else None]
    return slice(*parts)


_SLICE_INT = re.compile(r"[+-]?[0-9]{1,18}")


def find_steps(tables: Tables, warnings: list[str] | None = None) -> tuple[pd.DataFrame, str]:
    """Steps from ProfilerStep#N; else between Optimizer.step ends; else the whole window.

    N must be a decimal integer (at most 18 digits, so it fits the int64 column): a span named
    `ProfilerStep#x` or `ProfilerStep#1<img ...>` is not a profiler step; it is left out, with a warning."""
    ops = tables.cpu_ops
    cols = ["step", "start_us", "end_us", "dur_us"]
    if len(ops):
        is_step = name_flags(ops["name"], lambda n: n.startswith("ProfilerStep#"))
        is_valid = name_flags(ops["name"], lambda n: _STEP.match(n) is not None)
        bad = int(np.count_nonzero(is_step & ~is_valid))
        if bad and warnings is not None:
            warnings.append(f"{bad} spans named ProfilerStep#... do not end in a step number "
                            "(at most 18 digits) and were not taken as steps")
        if is_valid.any():
            st = ops[is_valid].copy()
            st["step"] = st["name"].astype(str).str.slice(len("ProfilerStep#")).astype(np.int64)
            st = st.sort_values(["step", "dur_us"]).drop_duplicates("step", keep="last")
            st = st.sort_values("ts_us")
            df = pd.DataFrame({"step": st["step"].to_numpy(), "start_us": st["ts_us"].to_numpy(),
                               "end_us": st["end_us"].to_numpy()})
            df["dur_us"] = df["end_us"] - df["start_us"]
            df = df[df["dur_us"] > 0].reset_index(drop=True)[cols]
            if len(df):
                return df, "ProfilerStep"
            if warnings is not None:  # every span has no length (or lost it to float precision)
                warnings.append("no ProfilerStep# span has a positive duration; steps were found another way")
        is_opt = name_flags(ops["name"], lambda n: n.startswith("Optimizer.step#"))
        if is_opt.sum() >= 2:
            ends = np.sort(ops.loc[is_opt, "end_us"].to_numpy())
            df = pd.DataFrame({"step": np.arange(1, len(ends)), "start_us": ends[:-1], "end_us": ends[1:]})
            df["dur_us"] = df["end_us"] - df["start_us"]
            return df[cols], "optimizer steps"
    lo, hi = _extent(tables)
    return pd.DataFrame({"step": [0], "start_us": [lo], "end_us": [hi], "dur_us": [hi - lo]})[cols], "whole trace"


def _extent(tables: Tables) -> tuple[float, float]:
    los, his = [], []
    for df in (tables.kernels, tables.memcpy, tables.cpu_ops, tables.runtime):
        if len(df):
            los.append(df["ts_us"].min())
            his.append(df["end_us"].max())
    if not los:
        return 0.0, 0.0
    return float(min(los)), float(max(his))


def _int64(v) -> int | None:
    """A metadata value that must be an integer: an int in int64 range (not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63) else None


def _device_id(v) -> int | None:
    """deviceProperties[].id: an int, or a string of decimal digits ("0", as some exporters write it)."""
    if isinstance(v, str) and _DEVICE_ID.fullmatch(v):
        return int(v)
    return _int64(v)


_DEVICE_ID = re.compile(r"[0-9]{1,18}")


def _devices(doc, is_rocm_hint: bool) -> list[DeviceInfo]:
    """deviceProperties -> DeviceInfo. Every value is untrusted: a field of the wrong type is
    unknown (None), and an id that is not an integer falls back to the entry's position."""
    out = []
    props = doc.deviceProperties
    for p in props if isinstance(props, list) else []:
        if not isinstance(p, dict):
            continue
        name = p.get("name")
        name = name if isinstance(name, str) and name else "unknown GPU"
        major = _int64(p.get("computeMajor"))
        did = _device_id(p.get("id"))
        is_rocm = is_rocm_hint or "AMD" in name or "Instinct" in name or "gfx" in name.lower()
        out.append(DeviceInfo(
            id=len(out) if did is None else did, name=name,
            compute_major=major, compute_minor=_int64(p.get("computeMinor")),
            num_sms=_int64(p.get("numSms")), total_mem_bytes=_int64(p.get("totalGlobalMem")),
            is_rocm=is_rocm,
            peaks=peaks_for(name, major if (major is not None and not is_rocm) else None)))
    return out


def _rank(doc, path: str, warnings: list[str], warn_default: bool) -> tuple[int, str, int | None]:
    di = doc.distributedInfo
    rank = _int64(di.get("rank")) if isinstance(di, dict) else None
    if rank is not None and rank >= 0:  # untrusted: a bool, a string or -1 is no rank
        ws = _int64(di.get("world_size"))
        return rank, "distributedInfo", ws if ws is not None and ws > 0 else None
    m = None
    for m in _RANK_IN_NAME.finditer(os.path.basename(path)):
        pass
    if m:
        return int(m.group(1)), "file name", None
    if warn_default:
        warnings.append(f"{os.path.basename(path)}: no rank in distributedInfo or in the file name; assumed rank 0")
    return 0, "default", None


def from_loaded(loaded: _load.Loaded, *, warn_default_rank: bool = False) -> Trace:
    tables = assemble(loaded.partials if loaded.partials is not None else [extract(loaded.events)])
    loaded.events = []  # the structs are no longer needed; let them go before analysis
    loaded.partials = None
    doc = loaded.doc
    warnings = list(loaded.warnings) + tables.warnings
    rank, rank_source, world = _rank(doc, loaded.path, warnings, warn_default_rank)
    versions = {k: getattr(doc, k) for k in ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                                             "hip_runtime_version", "roctracer_version")
                if getattr(doc, k) is not None}
    hip = versions.get("hip_runtime_version") is not None
    if not hip and len(tables.runtime):
        hip = any(str(c).startswith("hip") for c in pd.Categorical(tables.runtime["name"]).categories)
    profiler = {k: bool(getattr(doc, k)) for k in ("record_shapes", "with_stack", "profile_memory",
                                                   "with_modules", "with_flops")}
    run_config = doc.traceinspect if isinstance(doc.traceinspect, dict) else None
    if doc.traceinspect is not None and run_config is None:
        warnings.append("the trace's 'traceinspect' metadata is not an object; it was ignored")
    meta = TraceMeta(path=loaded.path, file_bytes=loaded.file_bytes, json_bytes=loaded.json_bytes,
                     n_events=tables.n_events, rank=rank, rank_source=rank_source, world_size=world,
                     devices=_devices(doc, hip), profiler=profiler, versions=versions,
                     run_config=run_config, base_time_ns=doc.baseTimeNanoseconds,
                     origin_us=tables.origin_us, lost_bytes=loaded.lost_bytes,
                     dropped_events=loaded.dropped_events)
    trace = Trace(meta, tables, warnings)
    _quality_checks(trace)
    return trace


def _quality_checks(trace: Trace) -> None:
    """Data-quality warnings that do not stop analysis."""
    if trace.meta.n_events == 0:
        trace.warnings.append("the trace has no events")
    elif not trace.has_gpu and not trace.has_cpu:
        trace.warnings.append("no CPU ops, runtime calls or GPU activity were found: nothing to analyse")
    elif not trace.has_gpu:
        trace.warnings.append("CPU-only trace: no GPU kernels or copies; GPU analyses are skipped")
    elif not trace.has_cpu:
        trace.warnings.append("GPU-only trace: no CPU ops or runtime calls; idle time cannot be attributed to host activity")
    k = trace.kernels
    if len(k) > 1:
        overl = 0
        for (_, _), g in k.groupby(["device", "stream"], sort=False):
            if len(g) < 2:
                continue
            ts = g["ts_us"].to_numpy()
            end = g["end_us"].to_numpy()
            overl += int(np.sum(ts[1:] < np.maximum.accumulate(end)[:-1] - 0.01))
        if overl:
            trace.warnings.append(f"{overl} kernels overlap an earlier kernel on the same stream "
                                  "(clock skew or a profiler bug); busy time uses their union")


PARALLEL_MIN_BYTES = 48 << 20   # below this, worker processes cost more than they save


def default_jobs(path: str | os.PathLike) -> int:
    """Parallel chunk decoders for one file when -j is not given."""
    from .stream import native_enabled
    if native_enabled():
        # the native scanner runs without the GIL: one thread per core (up to 4) pays from the
        # second chunk on, and costs nothing on a one-chunk file
        return min(os.cpu_count() or 1, 4)
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            gz = f.read(2) == _load.GZIP_MAGIC
    except OSError:
        size, gz = 0, False
    big = size * (8 if gz else 1) >= PARALLEL_MIN_BYTES
    cores = os.cpu_count() or 1
    # Python decoder, measured on a 2-vCPU machine: chunk worker processes gave at most 1.2x and
    # cost more than that in transfers, so only wider machines use them by default
    return min(cores, 4) if big and cores >= 4 else 1


def load_trace(path: str | os.PathLike, *, warn_default_rank: bool = False, jobs: int | None = None,
               progress=None) -> Trace:
    """Load one trace file. jobs: parallel chunk decoders (threads with the native scanner, else
    processes; 1: none; default: default_jobs); progress: an optional callable taking the
    fraction of the file read so far."""
    from .stream import load_streaming
    if jobs is None:
        jobs = default_jobs(path)
    was = gc.isenabled()
    gc.disable()  # millions of short-lived objects, no cycles: the collector only costs time here
    try:
        return from_loaded(load_streaming(path, jobs=jobs, progress=progress), warn_default_rank=warn_default_rank)
    finally:
        if was:
            gc.enable()
