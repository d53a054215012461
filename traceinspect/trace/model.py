"""Trace: metadata + tables + derived views (steps, timeline), built once per file.

Owns step detection and device/rank identification. Detectors read a Trace and never mutate it.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import re
from dataclasses import dataclass
from functools import cached_property

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceError, UsageError
from . import load as _load
from .hardware import Peaks, peaks_for
from .tables import Tables, assemble, extract_events, name_flags
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
    rank_source: str  # "distributedInfo" | "file name" | "default"
    world_size: int | None
    devices: list[DeviceInfo]
    profiler: dict  # record_shapes, with_stack, ...: True / False / None (the trace does not say)
    versions: dict  # cuda runtime/driver, cupti, hip
    run_config: dict | None  # traceinspect.capture metadata, when present
    base_time_ns: int | None
    origin_us: float
    lost_bytes: int = 0  # bytes of an incomplete last event discarded from a truncated file
    dropped_events: int = 0
    truncated: bool = False  # the file was cut off: only complete events, and steps, are analysed
    compressed: bool = False  # gzip
    steps_dropped: tuple = ()  # step numbers cut by the truncation (not analysed)
    profiler_source: dict = dataclasses.field(default_factory=dict)  # option -> where its value comes from

    @property
    def clock_origin_us(self) -> float:
        """The origin on the profiler's clock, the one the ranks of a host share: since kineto #910 (2024)
        `ts` is relative to the process's own baseTimeNanoseconds (absolute = base + ts, as HTA converts),
        so two ranks' files compare only after adding it; older traces write absolute `ts` and no base."""
        base = self.base_time_ns or 0
        if not 0 <= base < 2**63:  # not a time on a 64-bit ns clock (a damaged header): the ts alone
            base = 0
        return float(self.origin_us or 0.0) + base / 1e3


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
        return DeviceInfo(
            id=did,
            name="unknown GPU",
            compute_major=None,
            compute_minor=None,
            num_sms=None,
            total_mem_bytes=None,
            is_rocm=self.is_rocm,
            peaks=None,
        )

    # --- steps ------------------------------------------------------------------------------------
    @cached_property
    def all_steps(self) -> tuple[pd.DataFrame, str]:
        """The steps analysed: every step found, or in a truncated file only the complete ones."""
        steps, source = find_steps(self.tables, self.warnings)
        if self.meta.truncated:
            steps = steps[_complete(self, steps, source)].reset_index(drop=True)
        return steps, source

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
            raise UsageError(f"selects no step: the trace has {n} steps (0..{n - 1})", param="steps", value=spec)
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
        return UsageError(
            ": expected N, A:B or A:B:C with integers and a non-zero C",
            param="steps",
            value=spec,
            hint="a Python slice over the steps in time order: '1:' skips the first step, "
            "'2:5' takes the third to the fifth, '::2' every other one",
        )

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
            warnings.append(
                f"{bad} spans named ProfilerStep#... do not end in a step number "
                "(at most 18 digits) and were not taken as steps"
            )
        if is_valid.any():
            st = ops[is_valid].copy()
            st["step"] = st["name"].astype(str).str.slice(len("ProfilerStep#")).astype(np.int64)
            st = st.sort_values(["step", "dur_us"]).drop_duplicates("step", keep="last")
            st = st.sort_values("ts_us")
            df = pd.DataFrame(
                {"step": st["step"].to_numpy(), "start_us": st["ts_us"].to_numpy(), "end_us": st["end_us"].to_numpy()}
            )
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
        out.append(
            DeviceInfo(
                id=len(out) if did is None else did,
                name=name,
                compute_major=major,
                compute_minor=_int64(p.get("computeMinor")),
                num_sms=_int64(p.get("numSms")),
                total_mem_bytes=_int64(p.get("totalGlobalMem")),
                is_rocm=is_rocm,
                peaks=peaks_for(name, major if (major is not None and not is_rocm) else None),
            )
        )
    return out


# Profiler options the events themselves show where the metadata does not state them: the option ->
# (what shows it, the table and its test). Only "yes" can be inferred: no `Input Dims` in a trace with
# no CPU ops says nothing about record_shapes.
_INFERRED_OPTIONS = {
    "record_shapes": ("Input Dims args", lambda t: bool(t.cpu_ops["input_dims_raw"].notna().any())),
    "profile_memory": ("[memory] events", lambda t: len(t.memory) > 0),
    "with_stack": ("python_function events", lambda t: len(t.python) > 0),
}
PROFILER_OPTIONS = ("record_shapes", "with_stack", "profile_memory", "with_modules", "with_flops")


def _profiler_options(doc, tables) -> tuple[dict, dict]:
    """Each profiler option: the trace's metadata value (as a bool; torch writes only the options that
    are on), else the capture metadata's (traceinspect.capture records every option, off ones too: a
    bool), else inferred from the events (with its source), else None: unknown, never False."""
    values, source = {}, {}
    cap = doc.traceinspect.get("profiler") if isinstance(doc.traceinspect, dict) else None
    cap = cap if isinstance(cap, dict) else {}
    for k in PROFILER_OPTIONS:
        v = getattr(doc, k)
        if v is not None:
            values[k], source[k] = bool(v), "metadata"
        elif isinstance(cap.get(k), bool):
            values[k], source[k] = cap[k], "capture metadata"
        elif k in _INFERRED_OPTIONS and _INFERRED_OPTIONS[k][1](tables):
            values[k], source[k] = True, f"inferred from {_INFERRED_OPTIONS[k][0]}"
        else:
            values[k] = None
    return values, source


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
        warnings.append(default_rank_warning(os.path.basename(path)))
    return 0, "default", None


def default_rank_warning(name: str) -> str:
    """The warning for a file whose rank was assumed (rank_source "default"); reduce_ranks repeats it
    for every such rank from its typed summary."""
    return f"{name}: no rank in distributedInfo or in the file name; assumed rank 0"


# One name (kernel, op, thread, ...) is kept up to this many characters: every pattern match and every
# rendered line over names then costs at most this much per distinct name. The longest real name seen
# is 5,160 characters (a CUTLASS template); what classifies a kernel is in its first few hundred.
MAX_NAME_CHARS = 64 << 10


def _cap_names(tables: Tables, warnings: list[str]) -> None:
    """Cut names longer than MAX_NAME_CHARS (in every categorical column and the thread names), each
    to its first MAX_NAME_CHARS characters plus a marker with its length and a short hash (so two cut
    names stay distinct)."""
    cut = 0
    longest = 0

    def short(c):
        nonlocal cut, longest
        if not isinstance(c, str) or len(c) <= MAX_NAME_CHARS:
            return c
        cut += 1
        longest = max(longest, len(c))
        h = hashlib.blake2b(c.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
        return f"{c[:MAX_NAME_CHARS]}...[name cut: {len(c):,} characters, {h}]"

    for f in dataclasses.fields(tables):
        df = getattr(tables, f.name)
        if not isinstance(df, pd.DataFrame) or not len(df):
            continue
        for col in df.columns:
            if not isinstance(df[col].dtype, pd.CategoricalDtype):
                continue
            cats = df[col].cat.categories
            if not len(cats) or max(len(c) if isinstance(c, str) else 0 for c in cats) <= MAX_NAME_CHARS:
                continue
            df[col] = df[col].cat.rename_categories([short(c) for c in cats])
    tables.thread_names = {k: short(v) for k, v in tables.thread_names.items()}
    if cut:
        warnings.append(
            f"{cut} name{'s' if cut != 1 else ''} longer than {MAX_NAME_CHARS:,} characters "
            f"(the longest {longest:,}) {'were' if cut != 1 else 'was'} cut to that length"
        )


_SLICE = 1 << 17  # events per column slice of a file decoded in one piece (~32 MB of scan-layout columns)


def from_loaded(loaded: _load.Loaded, *, warn_default_rank: bool = False) -> Trace:
    parts = loaded.partials
    if parts is None:  # decoded in one piece: columns made a slice at a time, as the streaming reader's chunks
        ev = loaded.events
        parts = [extract_events(ev[i : i + _SLICE]) for i in range(0, len(ev), _SLICE)] or [extract_events([])]
    tables = assemble(parts)
    loaded.events = []  # the structs are no longer needed; let them go before analysis
    loaded.partials = None
    doc = loaded.doc
    warnings = list(loaded.warnings) + tables.warnings
    _cap_names(tables, warnings)
    rank, rank_source, world = _rank(doc, loaded.path, warnings, warn_default_rank)
    versions = {
        k: getattr(doc, k)
        for k in (
            "cuda_runtime_version",
            "cuda_driver_version",
            "cupti_version",
            "hip_runtime_version",
            "roctracer_version",
        )
        if getattr(doc, k) is not None
    }
    hip = versions.get("hip_runtime_version") is not None
    if not hip and len(tables.runtime):
        hip = any(str(c).startswith("hip") for c in pd.Categorical(tables.runtime["name"]).categories)
    profiler, profiler_source = _profiler_options(doc, tables)
    run_config = doc.traceinspect if isinstance(doc.traceinspect, dict) else None
    if doc.traceinspect is not None and run_config is None:
        warnings.append("the trace's 'traceinspect' metadata is not an object; it was ignored")
    read = loaded.read
    meta = TraceMeta(
        path=loaded.path,
        file_bytes=loaded.file_bytes,
        json_bytes=loaded.json_bytes,
        n_events=tables.n_events,
        rank=rank,
        rank_source=rank_source,
        world_size=world,
        devices=_devices(doc, hip),
        profiler=profiler,
        profiler_source=profiler_source,
        versions=versions,
        run_config=run_config,
        base_time_ns=doc.baseTimeNanoseconds,
        origin_us=tables.origin_us,
        lost_bytes=loaded.lost_bytes,
        dropped_events=loaded.dropped_events,
        truncated=loaded.truncated,
        compressed=bool(read and read.gzip),
    )
    trace = Trace(meta, tables, warnings)
    _not_a_trace(trace)
    if meta.truncated:
        _truncation(trace, stream_cut=bool(read and read.stream_cut), corrupt=bool(read and read.corrupt))
    elif read is not None and read.stream_cut:
        warnings.append(
            "the gzip stream ends without its trailer (the copy was cut just at the end), but the "
            "JSON inside is complete: nothing was lost"
        )
    _quality_checks(trace)
    return trace


_NOT_A_TRACE_HINT = (
    "pass a torch.profiler trace (*.pt.trace.json[.gz], from on_trace_ready or "
    "export_chrome_trace), not a memory timeline, snapshot or execution trace"
)


def _not_a_trace(trace: Trace) -> None:
    """A file with no events, or none that is a CPU op, runtime call, kernel or copy, is not a report's
    worth of data: an error (exit 3), never a report of zeros."""
    m = trace.meta
    if m.n_events == 0:
        raise TraceError(
            m.path,
            "has no trace events (its event list is empty)",
            hint="the profiler recorded nothing: check that prof.step() is called in the loop and "
            "that the schedule's active steps ran, then capture again",
        )
    if not trace.has_gpu and not trace.has_cpu:
        raise TraceError(
            m.path,
            f"none of its {m.n_events} events is a CPU op, runtime call, GPU kernel or "
            "copy: it is not a torch.profiler trace (or one that recorded nothing)",
            hint=_NOT_A_TRACE_HINT,
        )


def _gpu_expected(trace: Trace) -> bool:
    """GPU events belong in this trace: some were read, or its deviceProperties name a device."""
    return bool(trace.meta.devices) or trace.has_gpu or len(trace.runtime) > 0


def _horizons(trace: Trace) -> list[tuple[str, float]]:
    """How far in time each section of a truncated file reaches. Kineto writes every host op first,
    then the GPU section: runtime calls, kernels and copies merged in start-time order. A cut leaves
    the host ops complete up to their latest end, and the GPU section complete up to its latest start;
    a section that should be there and is not reaches nowhere (-inf)."""
    t = trace.tables
    out = []
    if len(t.cpu_ops):
        out.append(("host ops", float(t.cpu_ops["end_us"].max())))
    if _gpu_expected(trace):
        starts = [float(df["ts_us"].max()) for df in (t.runtime, t.kernels, t.memcpy) if len(df)]
        out.append(("GPU section", max(starts) if starts else -np.inf))
    return out


# runtime calls that enqueue GPU work (a kernel, copy, memset or graph): CUDA and HIP spell them
# with these words (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch, hipExtModuleLaunchKernel,
# cudaMemcpyAsync, cudaMemsetAsync, ...); a sync or an event record enqueues nothing
_ENQUEUES = ("launch", "memcpy", "memset")


def _complete(trace: Trace, steps: pd.DataFrame, source: str) -> np.ndarray:
    """Which steps of a truncated file are complete: the step ends before every section of the file
    stops (its span and its GPU work are in the data), and none of its launches comes after the last
    launch whose GPU work was kept (such a launch lost its kernel to the cut). 'whole trace' is
    clipped to the data instead."""
    if not len(steps):
        return np.zeros(0, dtype=bool)
    horizon = min((h for _, h in _horizons(trace)), default=np.inf)
    end = steps["end_us"].to_numpy()
    if source == "whole trace" and np.isfinite(horizon):
        steps.loc[:, "end_us"] = np.minimum(end, horizon)
        steps.loc[:, "dur_us"] = steps["end_us"] - steps["start_us"]
        return (steps["dur_us"] > 0).to_numpy()
    ok = end <= horizon
    t = trace.tables
    gpu = [df for df in (t.kernels, t.memcpy) if len(df)]
    if gpu and len(t.runtime):
        launched = [df.loc[df["launch_idx"] >= 0, "launch_ts_us"] for df in gpu]
        last_launch = max((float(x.max()) for x in launched if len(x)), default=-np.inf)
        rt = t.runtime
        enq = name_flags(rt["name"], lambda n: any(w in n.lower() for w in _ENQUEUES))
        rts = np.sort(rt.loc[enq, "ts_us"].to_numpy())
        lo = np.maximum(steps["start_us"].to_numpy(), last_launch)
        after = np.searchsorted(rts, end, side="right") - np.searchsorted(rts, lo, side="right")
        ok &= after <= 0
    return ok


def _ranges(nums) -> str:
    """[10, 11, 12, 14] -> '#10-#12, #14'."""
    nums = sorted(int(n) for n in nums)
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(f"#{nums[i]}" if i == j else f"#{nums[i]}-#{nums[j]}")
        i = j + 1
    return ", ".join(out)


def _truncation(trace: Trace, stream_cut: bool, corrupt: bool = False) -> None:
    """Say how much a truncated file lost (bytes, events, steps) and which steps are analysed; an
    error if no step is complete. What the file cannot tell (its size before the cut) is said, not
    guessed from the bytes discarded at the cut."""
    m = trace.meta
    found, source = find_steps(trace.tables)
    kept = trace.all_steps[0]
    kept_nums = set(kept["step"].tolist())
    dropped = [int(s) for s in found["step"].tolist() if s not in kept_nums] if source != "whole trace" else []
    m.steps_dropped = tuple(dropped)
    where = f"{_hbytes(m.json_bytes)} of JSON" + (f" (from {_hbytes(m.file_bytes)} of gzip)" if m.compressed else "")
    if corrupt:
        unknown = "the gzip data after that point is corrupt and cannot be decoded, so how much it held is unknown"
    elif stream_cut:
        unknown = (
            "the gzip stream was cut mid-way, so its size trailer is gone too: how much came after the "
            "cut is not recorded anywhere in the file"
        )
    else:
        unknown = "how much came after the cut is not recorded in the file"
    msg = (
        f"the file is truncated: it ends after {where}, in the middle of an event; the incomplete "
        f"last {m.lost_bytes} bytes were discarded and every complete event before them kept; {unknown}"
    )
    est = _lost_estimate(trace, found, kept) if len(kept) and dropped else None
    if est is not None:
        ev, nb = est
        msg += (
            f"; an estimated {ev:,} events (~{_hbytes(nb)} of JSON) were lost (estimate: the event "
            f"rate of the complete steps times the steps cut, and the average event size read)"
        )
    trace.warnings.append(msg)
    gpu_note = ""
    if _gpu_expected(trace) and not trace.has_gpu:
        name = trace.meta.devices[0].name if trace.meta.devices else "a GPU"
        gpu_note = (
            f"; the trace names {name} but no GPU event survived the cut (Kineto writes GPU events "
            "after all host events), so its GPU work was lost, not absent"
        )
    if not len(kept):
        n = len(found)
        raise TraceError(
            m.path,
            f"is truncated and none of its {n} step{'s' if n != 1 else ''} is complete "
            f"(the data ends after {where}){gpu_note}",
            hint="re-copy or re-download the complete file; a cut file cannot be analysed honestly",
        )
    if gpu_note:
        trace.warnings.append("GPU events lost to the truncation" + gpu_note)
    if dropped:
        trace.warnings.append(
            f"only the complete steps are analysed: {len(kept)} of {len(found)} kept "
            f"({_ranges(kept_nums)}); dropped because the cut reaches into them: {_ranges(dropped)}"
        )
    elif source == "whole trace":
        trace.warnings.append("the analysed window ends where the truncated data ends")


def _lost_estimate(trace: Trace, found: pd.DataFrame, kept: pd.DataFrame) -> tuple[int, int] | None:
    """(events, bytes) lost, estimated: each kind's events per complete step times the steps cut,
    less what was read of those steps; scaled to all events and to bytes by the averages read."""
    t = trace.tables
    kept_set = set(kept["step"].tolist())
    cut = found[~found["step"].isin(kept_set)]
    if not len(kept) or not len(cut):
        return None
    lost = 0.0
    analysed = 0
    for df in (t.cpu_ops, t.runtime, t.kernels, t.memcpy):
        if not len(df):
            continue
        analysed += len(df)
        ts = np.sort(df["ts_us"].to_numpy())

        def count(st):
            return int(
                (
                    np.searchsorted(ts, st["end_us"].to_numpy(), side="right")
                    - np.searchsorted(ts, st["start_us"].to_numpy(), side="left")
                ).sum()
            )

        rate = count(kept) / len(kept)
        lost += max(0.0, rate * len(cut) - count(cut))
    if not analysed or lost <= 0:
        return None
    events = lost * trace.meta.n_events / analysed
    return int(round(events)), int(events * trace.meta.json_bytes / max(1, trace.meta.n_events))


def _hbytes(n: float) -> str:
    return _load.human_bytes(n)


def _quality_checks(trace: Trace) -> None:
    """Data-quality warnings that do not stop analysis."""
    if not trace.has_gpu:
        if trace.meta.truncated and _gpu_expected(trace):
            pass  # said by _truncation: the GPU events were lost to the cut
        elif trace.meta.devices:
            trace.warnings.append(
                f"the trace names {trace.meta.devices[0].name} but holds no GPU kernels or copies: the GPU events "
                "are absent from the file (CUDA activity was not recorded, or the profiler lost them); GPU "
                "analyses are skipped"
            )
        else:
            trace.warnings.append("CPU-only trace: no GPU kernels or copies; GPU analyses are skipped")
    elif not trace.has_cpu:
        trace.warnings.append(
            "GPU-only trace: no CPU ops or runtime calls; idle time cannot be attributed to host activity"
        )
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
            trace.warnings.append(
                f"{overl} kernels overlap an earlier kernel on the same stream "
                "(clock skew or a profiler bug); busy time uses their union"
            )


PARALLEL_MIN_BYTES = 48 << 20  # below this, worker processes cost more than they save


def default_jobs(path: str | os.PathLike) -> int:
    """Parallel chunk decoders for one file when -j is not given."""
    from .stream import native_enabled

    if native_enabled():
        # the native scanner runs without the GIL: one thread per core (up to 4) pays from the
        # second chunk on, and costs nothing on a one-chunk file
        return min(os.cpu_count() or 1, 4)
    try:
        big = _load.estimate_json_bytes(path) >= PARALLEL_MIN_BYTES
    except (OSError, TraceError):
        big = False
    cores = os.cpu_count() or 1
    # Python decoder, measured on a 2-vCPU machine: chunk worker processes gave at most 1.2x and
    # cost more than that in transfers, so only wider machines use them by default
    return min(cores, 4) if big and cores >= 4 else 1


def load_trace(
    path: str | os.PathLike, *, warn_default_rank: bool = False, jobs: int | None = None, progress=None
) -> Trace:
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
