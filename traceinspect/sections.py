"""The report's sections: one msgspec Struct per section of the JSON (docs/report.schema.json), below
every producer. facts/, whatif/ and analyze.py build these Structs; report.py holds the Report that
gathers them, its schema version and its reading of saved reports (from_dict). Imports msgspec and the
standard library only, so that any layer may build a section.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

import msgspec

Num = Union[int, float]  # JSON has one number type: an int stays an int, a float a float (byte-identical output)
_U = msgspec.UnsetType
UNSET = msgspec.UNSET


class Section(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """A typed report section. The rules a saved report must follow live here, on the model (from_dict
    checks nothing else, after migrating an older report once: report._migrate):

    - a row or a nested section (a step, a part, a finding's fix step, a GPU) declares its fields without
      a default: msgspec requires them, at construction and when a report is read;
    - a section a report may lack whole (an empty section, `{}`, means "absent": no steps, no GPU) has
      defaults, and `required` names the fields it must have once it has any;
    - a field that may be missing (UNSET: the key is absent from the JSON) says why next to it: written
      only with a named cause, only when collectives were aligned, only in one section."""

    required: ClassVar[tuple[str, ...]] = ()
    allow_empty: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not self.required or (self.allow_empty and not self):
            return
        for f in self.required:
            if getattr(self, f) is UNSET:
                raise ValueError(f"Object missing required field `{f}`")

    def __bool__(self) -> bool:
        """False for an empty section (every field UNSET), as `{}` was."""
        return any(getattr(self, f) is not UNSET for f in self.__struct_fields__)

    def get(self, key: str, default: Any = None) -> Any:
        """Mapping-style read, for code not yet moved to attributes: UNSET reads as `default`."""
        v = getattr(self, key, UNSET) if key in self.__struct_fields__ else UNSET
        return default if v is UNSET else v

    def __getitem__(self, key: str) -> Any:
        v = self.get(key, UNSET)
        if v is UNSET:
            raise KeyError(key)
        return v

    def __contains__(self, key: str) -> bool:
        return self.get(key, UNSET) is not UNSET

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


class Peaks(Section, frozen=True, kw_only=True):
    """A GPU's peak throughput (traceinspect.trace.roofline's table), as the report states it."""

    name: str
    source: Union[str, _U] = UNSET  # where the figures come from (efficiency section only)
    approximate: bool
    mem_tbps: Union[Num, None, _U] = UNSET  # efficiency section only
    fp32_tflops: Union[Num, None]
    tf32_tflops: Union[Num, None]
    half_tflops: Union[Num, None]
    fp8_tflops: Union[Num, None, _U] = UNSET  # efficiency section only
    bf16: Union[bool, _U] = UNSET


class Gpu(Section, frozen=True, kw_only=True):
    name: str
    id: Union[int, None]
    arch: Union[str, None]
    compute_capability: Union[str, None]
    num_sms: Union[int, None]
    memory_bytes: Union[int, None]
    rocm: bool
    peaks: Union[Peaks, None]


NO_GPU = Gpu(
    name="", id=None, arch=None, compute_capability=None, num_sms=None, memory_bytes=None, rocm=False, peaks=None
)
"""What a report without a GPU reads as, where a reader compares GPUs (a diff, the environment)."""


class TraceInfo(Section, frozen=True, kw_only=True):
    """What was analysed: the file, its size and integrity, the GPU, the capture's settings."""

    required = (
        "file",
        "file_bytes",
        "json_bytes",
        "events",
        "lost_bytes",
        "dropped_events",
        "rank",
        "rank_source",
        "world_size",
        "gpu",
        "gpu_count_in_trace",
        "window",
        "profiler",
        "versions",
        "framework",
        "run_config",
        "run_framework",
        "origin_us",
        "base_time_ns",
        "has_gpu",
        "has_cpu",
    )

    file: Union[str, _U] = UNSET
    file_bytes: Union[int, None, _U] = UNSET
    json_bytes: Union[int, None, _U] = UNSET
    events: Union[int, None, _U] = UNSET
    lost_bytes: Union[int, None, _U] = UNSET
    dropped_events: Union[int, None, _U] = UNSET
    truncated: Union[bool, None, _U] = UNSET
    steps_dropped: Union[list[Any], None, _U] = UNSET
    rank: Union[int, _U] = UNSET
    rank_source: Union[str, None, _U] = UNSET
    world_size: Union[int, None, _U] = UNSET
    gpu: Union[Gpu, None, _U] = UNSET
    gpu_count_in_trace: Union[int, None, _U] = UNSET
    window: Union[str, _U] = UNSET
    profiler: Union[dict[str, Any], None, _U] = UNSET
    profiler_source: Union[dict[str, Any], None, _U] = UNSET
    versions: Union[dict[str, Any], None, _U] = UNSET
    framework: Union[str, None, _U] = UNSET
    run_config: Union[dict[str, Any], None, _U] = UNSET
    run_framework: Union[dict[str, Any], None, _U] = UNSET
    origin_us: Union[Num, None, _U] = UNSET
    base_time_ns: Union[int, None, _U] = UNSET
    has_gpu: Union[bool, _U] = UNSET
    has_cpu: Union[bool, _U] = UNSET


class StepRow(Section, frozen=True, kw_only=True):
    step: int
    start_us: Num
    dur_us: Num
    breakdown_us: Union[dict[str, Num], _U] = UNSET


class Steps(Section, frozen=True, kw_only=True):
    """The analysed steps: count, their statistics and one row per step. Empty (every field UNSET) for
    a report saved without steps."""

    required = ("count", "source", "mean_us", "median_us", "min_us", "max_us", "std_us", "window_us", "per_step")
    count: Union[int, _U] = UNSET
    source: Union[str, _U] = UNSET
    mean_us: Union[Num, _U] = UNSET
    median_us: Union[Num, _U] = UNSET
    min_us: Union[Num, _U] = UNSET
    max_us: Union[Num, _U] = UNSET
    std_us: Union[Num, _U] = UNSET
    window_us: Union[Num, _U] = UNSET
    per_step: Union[list[StepRow], _U] = UNSET


class Part(Section, frozen=True, kw_only=True):
    """One part of the step-time breakdown (compute, comm, memcpy, an idle cause)."""

    us: Num
    label: str
    frac: Num
    per_step_us: Num


class TopKernel(Section, frozen=True, kw_only=True):
    name: str
    count: int
    total_us: Num
    median_us: Num
    frac_of_kernel_time: Num


class RankSummary(Section, frozen=True, kw_only=True):
    """One rank of a multi-rank analysis, reduced from that rank's typed Report (never from strings)."""

    rank: int
    file: str
    median_step_us: Num
    mean_step_us: Num
    steps: int
    slowest: bool
    gpu_busy_frac: Union[Num, None]
    top_finding: Union[str, None]
    gating: Union[bool, _U] = UNSET  # only when the collectives were aligned (cross_rank)
    last_arrivals: Union[int, _U] = UNSET  # only when the collectives were aligned (cross_rank)
    collective_wait_us_per_step: Union[Num, _U] = UNSET  # only when the collectives were aligned (cross_rank)
    collective_transfer_us_per_step: Union[Num, _U] = UNSET  # only when the collectives were aligned (cross_rank)
    clock_offset_us: Union[Num, None, _U] = UNSET  # only when the collectives were aligned (cross_rank)


# --- the verdict: the headline, the expected step time and the path of fixes to it ---------------------


class FixStep(Section, frozen=True, kw_only=True):
    """One fix on the verdict's cumulative path: the step time before and after it, and the model used."""

    fix: str
    from_us: Num
    to_us: Num
    model: str


class Rediagnosed(Section, frozen=True, kw_only=True):
    """A cause asked again in the predicted run (docs/whatif.md, "Next bottlenecks"): present now (a
    finding not on the fix path, or a detector's signature below its threshold), what the replay of its
    fix saves once the verdict's replayed fixes (`after`) are in."""

    fix: str
    present: str  # "reported" (a finding not on the path) | "below threshold" (the detector declined it)
    reason: str  # the finding's title, or the detector's reason for declining now
    after: list[str]  # the replayed fixes of the verdict's path it is asked after
    from_us: Num  # median step of the replay with `after`
    to_us: Num  # ... and this fix on top
    saved_per_step_us: Num
    share_of_predicted: Num  # saved over from_us


class ReplayEdges(Section, frozen=True, kw_only=True):
    """Where the replay graph's dependencies between streams and threads came from: recorded by the trace
    (`cuda_sync` records) or inferred from timing (docs/whatif.md, "Edges")."""

    recorded: int
    inferred: int
    recorded_share: Union[Num, None]  # None: the graph has no such edge
    cross_stream_recorded: int
    cross_stream_inferred: int
    host_wait_recorded: int
    host_wait_inferred: int
    cross_thread_inferred: int
    stream_waits_complete: bool  # every stream-wait call recorded: no cross-stream guess
    contradicted: int  # records the measured times contradict (dropped)


class Identity(Section, frozen=True, kw_only=True):
    """The replay of the unmodified trace against the measured steps: the what-if model's own error, and
    which of its edges were recorded and which inferred."""

    median_error_frac: Num
    max_error_frac: Num
    replayed_median_us: Num
    measured_median_us: Num
    edges: Union[ReplayEdges, _U] = UNSET


class SpeedOfLight(Section, frozen=True, kw_only=True):
    """Per step, the roofline floor of the GPU work: the modelled ops at their roofline (roofline_us), the
    rest at its measured time (unmodelled_us), scaled by the kernels' overlap; sol_us None: why says what
    is missing. mfu: matrix FLOPs at peak over the median step (None without matrix FLOPs)."""

    sol_us: Union[Num, None]
    roofline_us: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    unmodelled_us: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    overlap: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    why: str
    matrix_flops_per_step: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    achieved_tflops: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    mfu: Union[Num, None, _U] = UNSET  # only where the floor was computed (sol_us not None)
    modelled_kernel_frac: Union[Num, _U] = UNSET  # only where the floor was computed (sol_us not None)
    recorded_flops_per_step: Union[Num, _U] = UNSET  # with_flops traces: the profiler's own count
    recorded_vs_model: Union[Num, None, _U] = UNSET


class WhatIf(Section, frozen=True, kw_only=True):
    identity: Identity
    speed_of_light: SpeedOfLight
    saved_alone_per_step_us: dict[str, Num]  # fix -> per-step time its replay alone saves


class Verdict(Section, frozen=True, kw_only=True):
    """The report's headline. `top` is the top cause's name, or None (then `headline` says why: no
    cause, no GPU, or time no finding explains). A multi-rank job's verdict names the gating rank."""

    required = ("top", "median_step_us")

    top: Union[str, None, _U] = UNSET
    top_title: Union[str, _U] = UNSET  # only with a named cause
    headline: Union[str, _U] = UNSET
    median_step_us: Union[Num, None, _U] = UNSET
    unexplained_frac_of_step: Union[Num, _U] = UNSET
    explained_frac_of_idle: Union[Num, None, _U] = UNSET
    next_bottlenecks: Union[list[str], _U] = UNSET  # the re-diagnosed causes' names (rediagnosed)
    rediagnosed: Union[list[Rediagnosed], _U] = UNSET  # causes that would cost >= 3% once the path is fixed
    top_per_step_us: Union[Num, None, _U] = UNSET  # only with a named cause
    top_frac: Union[Num, None, _U] = UNSET  # only with a named cause
    top_confidence: Union[str, _U] = UNSET  # only with a named cause
    expected_step_us: Union[Num, _U] = UNSET  # only with a named cause
    expected_from: Union[list[str], _U] = UNSET  # only with a named cause
    expected_model: Union[str, _U] = UNSET  # only with a named cause
    path: Union[list[FixStep], _U] = UNSET  # only with a named cause
    whatif: Union[WhatIf, _U] = UNSET  # only with a named cause
    assumption: Union[str, _U] = UNSET  # only with a named cause
    gating_rank: Union[int, _U] = UNSET  # multi-rank: only when a rank gates the step
    gating_cost_per_step_us: Union[Num, _U] = UNSET  # multi-rank: only when a rank gates the step
    gating_caused_wait_per_step_us: Union[Num, _U] = UNSET  # multi-rank: only when a rank gates the step
    rank_headline: Union[str, _U] = UNSET  # the gating rank's own headline
    # a named cause comes with its title and the expected step time
    required_with_top: ClassVar[tuple[str, ...]] = (
        "top_title",
        "median_step_us",
        "expected_step_us",
        "expected_from",
        "assumption",
    )

    def __post_init__(self) -> None:
        if self.top not in (None, UNSET):
            for f in self.required_with_top:
                if getattr(self, f) in (UNSET, None):
                    raise ValueError(f"Object missing required field `{f}`")


# --- the explained-time account: GPU idle time split into what each finding claims + unexplained -------


class AccountPart(Section, frozen=True, kw_only=True):
    name: str
    code: str
    us: Num
    per_step_us: Num
    frac_of_idle: Num
    frac_of_step: Num
    by_part_us: dict[str, Num]


class UnexplainedReason(Section, frozen=True, kw_only=True):
    part: str
    us: Num
    per_step_us: Num
    frac_of_step: Num
    why: str


class BusyCause(Section, frozen=True, kw_only=True):
    name: str
    code: str
    us: Num
    per_step_us: Num


class AccountStep(Section, frozen=True, kw_only=True):
    step: int
    idle_us: Num
    claims_us: dict[str, Num]
    unexplained_us: Num
    artifacts_us: Union[Num, _U] = UNSET  # idle time trace quality names in this step (when the account has any)


class AccountArtifact(Section, frozen=True, kw_only=True):
    """GPU idle time the trace cannot attribute (trace quality): named instead of "unexplained"."""

    check: str  # the trace-quality check that names it
    label: str
    us: Num
    per_step_us: Num
    frac_of_step: Num
    by_part_us: dict[str, Num]


class Account(Section, frozen=True, kw_only=True):
    """The GPU idle time of the analysed steps: what each active finding claims, per idle part, and the
    unexplained rest. The parts add up to the idle time."""

    required = (
        "idle_us",
        "idle_per_step_us",
        "idle_frac_of_step",
        "parts",
        "explained_us",
        "explained_frac_of_idle",
        "unexplained_us",
        "unexplained_per_step_us",
        "unexplained_frac_of_step",
        "unexplained_by_part_us",
        "unexplained_reasons",
        "busy_causes",
        "overlap_us",
    )
    idle_us: Union[Num, _U] = UNSET
    idle_per_step_us: Union[Num, _U] = UNSET
    idle_frac_of_step: Union[Num, _U] = UNSET
    parts: Union[list[AccountPart], _U] = UNSET
    explained_us: Union[Num, _U] = UNSET
    explained_frac_of_idle: Union[Num, _U] = UNSET
    unexplained_us: Union[Num, _U] = UNSET
    unexplained_per_step_us: Union[Num, _U] = UNSET
    unexplained_frac_of_step: Union[Num, _U] = UNSET
    unexplained_by_part_us: Union[dict[str, Num], _U] = UNSET
    unexplained_reasons: Union[list[UnexplainedReason], _U] = UNSET
    busy_causes: Union[list[BusyCause], _U] = UNSET
    overlap_us: Union[Num, _U] = UNSET
    per_step: Union[list[AccountStep], _U] = UNSET
    artifacts: Union[list[AccountArtifact], _U] = UNSET  # idle time trace quality names (not unexplained)


# --- device memory: capacity, peaks, headroom, and the batch that fits --------------------------------


class MemoryStep(Section, frozen=True, kw_only=True):
    step: int
    start_allocated_bytes: Union[Num, None]
    peak_allocated_bytes: Union[Num, None]
    peak_reserved_bytes: Union[Num, None]


class MemoryDevice(Section, frozen=True, kw_only=True):
    device: Union[int, None]
    capacity_bytes: Union[Num, None]
    peak_allocated_bytes: Union[Num, None, _U] = UNSET
    peak_reserved_bytes: Union[Num, None, _U] = UNSET
    start_allocated_bytes: Union[Num, None, _U] = UNSET
    headroom_bytes: Union[Num, None, _U] = UNSET
    per_step: Union[list[MemoryStep], _U] = UNSET


class BatchFit(Section, frozen=True, kw_only=True):
    """The largest micro-batch under the margin, and the accumulation that keeps the effective batch."""

    batch: Union[int, None]
    factor: int
    max_factor: Num
    accumulation: Union[int, None]
    current_batch: Union[int, None]
    current_accumulation: Union[int, None]
    fixed_bytes: Num
    per_batch_bytes: Num
    capacity_bytes: Num
    margin_frac: Num
    predicted_peak_bytes: Num
    measured: list[str]
    assumed: list[str]
    batch_name: str
    accumulation_name: str
    # who recommends `factor`: the launch-bound fix's replay sweep (whatif/batch.py), or None: no cause
    # asks for a larger batch, so `factor` is 1 and only max_factor is a figure
    recommended_by: Union[str, None]


class Memory(Section, frozen=True, kw_only=True):
    """Device memory per step, or (source "") the reason there is no figure and the capture option that adds one."""

    required = ("source", "margin_frac", "devices")
    source: Union[str, _U] = UNSET  # "trace" | "capture" | "" (no figure)
    margin_frac: Union[Num, _U] = UNSET
    reason: Union[str, _U] = UNSET
    hint: Union[str, _U] = UNSET
    devices: Union[list[MemoryDevice], _U] = UNSET
    batch_fit: Union[BatchFit, _U] = UNSET


# --- per-shape efficiency against the roofline --------------------------------------------------------


class ShapeRow(Section, frozen=True, kw_only=True):
    """One (op, input shapes, input types) group of the analysed steps against the roofline; None: not modelled."""

    op: str
    family: str
    shape: str
    dtype: str
    dims: dict[str, Any]
    calls_per_step: Num
    gpu_us_per_step: Num
    us_per_call: Num
    gflops_per_call: Union[Num, None]
    mbytes_per_call: Union[Num, None]
    tflops: Union[Num, None]
    tbps: Union[Num, None]
    intensity: Union[Num, None]
    peak_tflops: Union[Num, None]
    peak_unit: Union[str, None, _U] = UNSET  # what peak_tflops is the peak of ("bf16 matrix", "fp32 vector")
    peak_tbps: Union[Num, None]
    bound: Union[str, None]
    share_of_peak: Union[Num, None]
    roofline_us_per_step: Union[Num, None]
    kernel: str
    note: str


class Efficiency(Section, frozen=True, kw_only=True):
    required = ("peaks", "kernel_us_per_step", "modelled_frac", "rows_total", "rows")
    peaks: Union[Peaks, None, _U] = UNSET  # None: no peak table entry for this GPU
    kernel_us_per_step: Union[Num, _U] = UNSET
    modelled_frac: Union[Num, _U] = UNSET
    rows_total: Union[int, _U] = UNSET
    rows: Union[list[ShapeRow], _U] = UNSET


# --- many ranks: collectives aligned across ranks, and the rank that gates the step -------------------


class RankAlignment(Section, frozen=True, kw_only=True):
    rank: int
    last_arrivals: int
    caused_wait_us_per_step: Num
    job_cost_us_per_step: Num
    wait_us_per_step: Num
    transfer_us_per_step: Num
    clock_offset_us: Num


class CollectiveRow(Section, frozen=True, kw_only=True):
    index: int
    group: int
    collective: str
    arrival_skew_us: Num
    last_rank: Union[int, None]
    job_cost_us: Num


class JobRank(Section, frozen=True, kw_only=True):
    """One rank in the job replay: its measured median step, the job replay's, and the error."""

    rank: int
    measured_us: Num
    replayed_us: Num
    error_frac: Num


class JobPrediction(Section, frozen=True, kw_only=True):
    """The job's step after one change on some ranks: a cause fixed (fix), or a rank keeping pace (fix
    None: left out of every collective's last arrival)."""

    what: str
    fix: Union[str, None]
    ranks: list[int]
    step_us: Num
    saved_per_step_us: Num
    saved_frac: Num


class JobReplay(Section, frozen=True, kw_only=True):
    """The ranks replayed together, joined at their matched collectives (whatif/job.py)."""

    model: str
    measured_step_us: Num  # the slowest rank's measured median step
    replayed_step_us: Num  # the same, replayed unmodified
    max_error_frac: Num
    per_rank: list[JobRank]
    predictions: list[JobPrediction]


class CrossRank(Section, frozen=True, kw_only=True):
    required = (
        "matched",
        "ranks",
        "steps",
        "clock",
        "clock_tolerance_us",
        "straggler",
        "gating_rank",
        "per_rank",
        "collectives",
        "notes",
        "max_arrival_skew_us",
    )
    matched: Union[int, _U] = UNSET
    ranks: Union[list[int], _U] = UNSET
    steps: Union[int, _U] = UNSET
    clock: Union[str, _U] = UNSET
    clock_tolerance_us: Union[Num, _U] = UNSET
    straggler: Union[int, None, _U] = UNSET
    gating_rank: Union[int, None, _U] = UNSET
    per_rank: Union[list[RankAlignment], _U] = UNSET
    collectives: Union[list[CollectiveRow], _U] = UNSET
    notes: Union[list[str], _U] = UNSET
    max_arrival_skew_us: Union[Num, _U] = UNSET
    job: Union[JobReplay, _U] = UNSET  # only when every aligned rank's replay summary came back


Span = Annotated[list[Num], msgspec.Meta(min_length=2, max_length=2)]  # [start, end]: JSON has no tuples


class TimelineSample(Section, frozen=True, kw_only=True):
    """One representative step's intervals per timeline part, for the HTML chart."""

    required = ("intervals", "step", "index", "start_us", "dur_us", "device", "resolution_us", "choice", "dropped")

    intervals: Union[dict[str, list[Span]], _U] = UNSET  # part -> [start_us, end_us] pairs
    step: Union[int, None, _U] = UNSET
    index: Union[int, None, _U] = UNSET
    start_us: Union[Num, None, _U] = UNSET
    dur_us: Union[Num, None, _U] = UNSET
    device: Union[int, None, _U] = UNSET
    resolution_us: Union[Num, None, _U] = UNSET
    choice: Union[str, _U] = UNSET
    dropped: Union[int, _U] = UNSET


# --- `traceinspect whatif`: one replay of a trace with the named fixes (api.whatif) --------------------


class WhatIfStep(Section, frozen=True, kw_only=True):
    required, allow_empty = ("step", "measured_us", "predicted_us"), False
    step: Union[int, _U] = UNSET
    measured_us: Union[Num, _U] = UNSET
    predicted_us: Union[Num, _U] = UNSET
    gpu_work_us: Union[Num, _U] = UNSET  # the busiest stream's GPU work launched in the step, after the fixes
    gpu_floor_us: Union[Num, _U] = UNSET  # the step with no host time left: the GPU work, less the lag the window shows


class WhatIfRun(Section, frozen=True, kw_only=True):
    """Measured against predicted step times after the fixes, the predicted run's critical path, the
    replay's own error on the unmodified trace (identity) and the speed of light (docs/whatif.md)."""

    required = ("fixes", "steps", "measured_median_us", "predicted_median_us")
    fixes: Union[list[str], _U] = UNSET
    models: Union[dict[str, str], _U] = UNSET  # fix -> the transformation's stated model
    model: Union[str, _U] = UNSET
    not_found: Union[list[str], _U] = UNSET  # fixes whose detector did not fire on this trace
    steps: Union[list[WhatIfStep], _U] = UNSET
    measured_median_us: Union[Num, _U] = UNSET
    predicted_median_us: Union[Num, _U] = UNSET
    critical_path_us: Union[dict[str, Num], _U] = UNSET  # part -> us over the window
    identity: Union[Identity, _U] = UNSET
    speed_of_light: Union[SpeedOfLight, _U] = UNSET
    notes: Union[list[str], _U] = UNSET


class WhatIfJobRank(Section, frozen=True, kw_only=True):
    rank: int
    fixes: list[str]  # applied to this rank, in order
    measured_us: Num  # median step
    replayed_us: Num  # the job replay unmodified
    predicted_us: Num  # the job replay with the fixes


class WhatIfJob(Section, frozen=True, kw_only=True):
    """`traceinspect whatif DIR --fix CAUSE@rankN`: the job replayed with fixes on some ranks
    (whatif/job.py; docs/multi-rank.md, "Job replay")."""

    model: str
    fixes: list[str]  # as asked: NAME[:VARIANT][@rankN]
    measured_step_us: Num  # the slowest rank's measured median step
    replayed_step_us: Num
    predicted_step_us: Num
    per_rank: list[WhatIfJobRank]
    notes: list[str]


Setting = Union[str, int, float, bool, list[str]]


def known(value: Any, default: Any = None) -> Any:
    """A section field's value, or `default` where the key was absent (UNSET)."""
    return default if value is UNSET else value


def py(value: Any) -> Any:
    """A value as a section stores it: a numpy scalar becomes the same Python number (msgspec does not
    encode numpy scalars); anything else is returned as it is. For the producers that build sections."""
    return value.item() if hasattr(value, "item") else value


class QualityCheck(Section, frozen=True, kw_only=True):
    """One trace-quality check: its status (ok | limited | poor), what it measured over the analysed
    steps, its threshold and what the report does about it. One more check is one more row."""

    check: str
    status: str
    short: str  # the phrase the trust line uses ("" when ok)
    summary: str
    effect: str
    threshold: str
    values: dict[str, Num]
    steps: Union[list[int], _U] = UNSET  # the steps it names (warm-up, dropped kernels)


class TraceQuality(Section, frozen=True, kw_only=True):
    """Can the numbers be trusted: the overall status (good | limited | poor), the trust line shown at the
    top of the verdict, and the checks."""

    required = ("status", "line", "checks")
    status: Union[str, _U] = UNSET
    line: Union[str, _U] = UNSET
    checks: Union[list[QualityCheck], _U] = UNSET
