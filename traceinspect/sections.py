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
    """A typed report section. A field is UNSET where the key is absent from the JSON (a report saved by
    an older version, or a key written only sometimes), so to_dict() writes exactly the keys it read.

    The rules a saved report must follow live here, on the model (from_dict checks nothing else):
    the field types, plus `required`: the fields a section must have once it has any (an empty
    section, `{}`, means "absent": no steps, no GPU); `allow_empty = False` for list rows."""

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


class Peaks(Section, frozen=True):
    """A GPU's peak throughput (traceinspect.trace.roofline's table), as the report states it."""

    required = ("name",)
    name: Union[str, _U] = UNSET
    source: Union[str, _U] = UNSET  # where the figures come from (efficiency section only)
    approximate: Union[bool, _U] = UNSET
    mem_tbps: Union[Num, None, _U] = UNSET
    fp32_tflops: Union[Num, None, _U] = UNSET
    tf32_tflops: Union[Num, None, _U] = UNSET
    half_tflops: Union[Num, None, _U] = UNSET
    fp8_tflops: Union[Num, None, _U] = UNSET
    bf16: Union[bool, _U] = UNSET


class Gpu(Section, frozen=True):
    required = ("name",)
    name: Union[str, _U] = UNSET
    id: Union[int, None, _U] = UNSET
    arch: Union[str, None, _U] = UNSET
    compute_capability: Union[str, None, _U] = UNSET
    num_sms: Union[int, None, _U] = UNSET
    memory_bytes: Union[int, None, _U] = UNSET
    rocm: Union[bool, _U] = UNSET
    peaks: Union[Peaks, None, _U] = UNSET


class TraceInfo(Section, frozen=True):
    """What was analysed: the file, its size and integrity, the GPU, the capture's settings."""

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


class StepRow(Section, frozen=True):
    required, allow_empty = ("step", "dur_us"), False
    step: Union[int, _U] = UNSET
    start_us: Union[Num, _U] = UNSET
    dur_us: Union[Num, _U] = UNSET
    breakdown_us: Union[dict[str, Num], _U] = UNSET


class Steps(Section, frozen=True):
    """The analysed steps: count, their statistics and one row per step. Empty (every field UNSET) for
    a report saved without steps."""

    required = ("count", "source", "mean_us", "median_us", "min_us", "max_us")
    count: Union[int, _U] = UNSET
    source: Union[str, _U] = UNSET
    mean_us: Union[Num, _U] = UNSET
    median_us: Union[Num, _U] = UNSET
    min_us: Union[Num, _U] = UNSET
    max_us: Union[Num, _U] = UNSET
    std_us: Union[Num, _U] = UNSET
    window_us: Union[Num, _U] = UNSET
    per_step: Union[list[StepRow], _U] = UNSET


class Part(Section, frozen=True):
    """One part of the step-time breakdown (compute, comm, memcpy, an idle cause)."""

    required, allow_empty = ("us",), False
    us: Union[Num, _U] = UNSET
    label: Union[str, _U] = UNSET
    frac: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET


class TopKernel(Section, frozen=True):
    required, allow_empty = ("name", "count", "total_us", "median_us", "frac_of_kernel_time"), False
    name: Union[str, _U] = UNSET
    count: Union[int, _U] = UNSET
    total_us: Union[Num, _U] = UNSET
    median_us: Union[Num, _U] = UNSET
    frac_of_kernel_time: Union[Num, _U] = UNSET


class RankSummary(Section, frozen=True):
    """One rank of a multi-rank analysis, reduced from that rank's typed Report (never from strings)."""

    required, allow_empty = ("rank", "file", "median_step_us", "mean_step_us", "steps", "slowest"), False
    rank: Union[int, _U] = UNSET
    file: Union[str, _U] = UNSET
    median_step_us: Union[Num, _U] = UNSET
    mean_step_us: Union[Num, _U] = UNSET
    steps: Union[int, _U] = UNSET
    slowest: Union[bool, _U] = UNSET
    gpu_busy_frac: Union[Num, None, _U] = UNSET
    top_finding: Union[str, None, _U] = UNSET
    gating: Union[bool, _U] = UNSET
    last_arrivals: Union[int, _U] = UNSET
    collective_wait_us_per_step: Union[Num, _U] = UNSET
    collective_transfer_us_per_step: Union[Num, _U] = UNSET
    clock_offset_us: Union[Num, None, _U] = UNSET


# --- the verdict: the headline, the expected step time and the path of fixes to it ---------------------


class FixStep(Section, frozen=True):
    """One fix on the verdict's cumulative path: the step time before and after it, and the model used."""

    required, allow_empty = ("fix", "from_us", "to_us", "model"), False
    fix: Union[str, _U] = UNSET
    from_us: Union[Num, _U] = UNSET
    to_us: Union[Num, _U] = UNSET
    model: Union[str, _U] = UNSET


class Rediagnosed(Section, frozen=True):
    """A cause asked again in the predicted run (docs/whatif.md, "Next bottlenecks"): present now (a
    masked finding, or a detector's signature below its threshold), what the replay of its fix saves
    once the verdict's replayed fixes (`after`) are in."""

    required, allow_empty = ("fix", "present", "after", "from_us", "to_us"), False
    fix: Union[str, _U] = UNSET
    present: Union[str, _U] = UNSET  # "masked" (a finding) | "below threshold" (the detector declined it)
    reason: Union[str, _U] = UNSET  # the finding's title, or the detector's reason for declining now
    after: Union[list[str], _U] = UNSET  # the replayed fixes of the verdict's path it is asked after
    from_us: Union[Num, _U] = UNSET  # median step of the replay with `after`
    to_us: Union[Num, _U] = UNSET  # ... and this fix on top
    saved_per_step_us: Union[Num, _U] = UNSET
    share_of_predicted: Union[Num, _U] = UNSET  # saved over from_us


class ReplayEdges(Section, frozen=True):
    """Where the replay graph's dependencies between streams and threads came from: recorded by the trace
    (`cuda_sync` records) or inferred from timing (docs/whatif.md, "Edges")."""

    recorded: Union[int, _U] = UNSET
    inferred: Union[int, _U] = UNSET
    recorded_share: Union[Num, None, _U] = UNSET  # None: the graph has no such edge
    cross_stream_recorded: Union[int, _U] = UNSET
    cross_stream_inferred: Union[int, _U] = UNSET
    host_wait_recorded: Union[int, _U] = UNSET
    host_wait_inferred: Union[int, _U] = UNSET
    cross_thread_inferred: Union[int, _U] = UNSET
    stream_waits_complete: Union[bool, _U] = UNSET  # every stream-wait call recorded: no cross-stream guess
    contradicted: Union[int, _U] = UNSET  # records the measured times contradict (dropped)


class Identity(Section, frozen=True):
    """The replay of the unmodified trace against the measured steps: the what-if model's own error, and
    which of its edges were recorded and which inferred."""

    median_error_frac: Union[Num, _U] = UNSET
    max_error_frac: Union[Num, _U] = UNSET
    replayed_median_us: Union[Num, _U] = UNSET
    measured_median_us: Union[Num, _U] = UNSET
    edges: Union[ReplayEdges, _U] = UNSET


class SpeedOfLight(Section, frozen=True):
    """Per step, the roofline floor of the GPU work: the modelled ops at their roofline (roofline_us), the
    rest at its measured time (unmodelled_us), scaled by the kernels' overlap; sol_us None: why says what
    is missing. mfu: matrix FLOPs at peak over the median step (None without matrix FLOPs)."""

    sol_us: Union[Num, None, _U] = UNSET
    roofline_us: Union[Num, _U] = UNSET
    unmodelled_us: Union[Num, _U] = UNSET
    overlap: Union[Num, _U] = UNSET
    why: Union[str, _U] = UNSET
    matrix_flops_per_step: Union[Num, _U] = UNSET
    achieved_tflops: Union[Num, _U] = UNSET
    mfu: Union[Num, None, _U] = UNSET
    modelled_kernel_frac: Union[Num, _U] = UNSET
    recorded_flops_per_step: Union[Num, _U] = UNSET  # with_flops traces: the profiler's own count
    recorded_vs_model: Union[Num, None, _U] = UNSET


class WhatIf(Section, frozen=True):
    identity: Union[Identity, _U] = UNSET
    speed_of_light: Union[SpeedOfLight, _U] = UNSET
    saved_alone_per_step_us: Union[dict[str, Num], _U] = UNSET  # fix -> per-step time its replay alone saves


class Verdict(Section, frozen=True):
    """The report's headline. `top` is the top cause's name, or None (then `headline` says why: no
    cause, no GPU, or time no finding explains). A multi-rank job's verdict names the gating rank."""

    top: Union[str, None, _U] = UNSET
    top_title: Union[str, _U] = UNSET
    headline: Union[str, _U] = UNSET
    median_step_us: Union[Num, None, _U] = UNSET
    unexplained_frac_of_step: Union[Num, _U] = UNSET
    explained_frac_of_idle: Union[Num, None, _U] = UNSET
    next_bottlenecks: Union[list[str], _U] = UNSET  # latent causes, hidden by the active ones
    rediagnosed: Union[list[Rediagnosed], _U] = UNSET  # causes that would cost >= 3% once the path is fixed
    top_per_step_us: Union[Num, None, _U] = UNSET
    top_frac: Union[Num, None, _U] = UNSET
    top_confidence: Union[str, _U] = UNSET
    expected_step_us: Union[Num, _U] = UNSET
    expected_from: Union[list[str], _U] = UNSET
    expected_model: Union[str, _U] = UNSET
    path: Union[list[FixStep], _U] = UNSET
    whatif: Union[WhatIf, _U] = UNSET
    assumption: Union[str, _U] = UNSET
    gating_rank: Union[int, _U] = UNSET
    gating_cost_per_step_us: Union[Num, _U] = UNSET
    gating_caused_wait_per_step_us: Union[Num, _U] = UNSET
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


class AccountPart(Section, frozen=True):
    required, allow_empty = ("name", "us"), False
    name: Union[str, _U] = UNSET
    code: Union[str, _U] = UNSET
    us: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET
    frac_of_idle: Union[Num, _U] = UNSET
    frac_of_step: Union[Num, _U] = UNSET
    by_part_us: Union[dict[str, Num], _U] = UNSET


class UnexplainedReason(Section, frozen=True):
    required, allow_empty = ("part", "us", "why"), False
    part: Union[str, _U] = UNSET
    us: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET
    frac_of_step: Union[Num, _U] = UNSET
    why: Union[str, _U] = UNSET


class BusyCause(Section, frozen=True):
    required, allow_empty = ("name", "us"), False
    name: Union[str, _U] = UNSET
    code: Union[str, _U] = UNSET
    us: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET


class AccountStep(Section, frozen=True):
    required, allow_empty = ("step", "idle_us"), False
    step: Union[int, _U] = UNSET
    idle_us: Union[Num, _U] = UNSET
    claims_us: Union[dict[str, Num], _U] = UNSET
    unexplained_us: Union[Num, _U] = UNSET
    artifacts_us: Union[Num, _U] = UNSET  # idle time trace quality names in this step (when the account has any)


class AccountArtifact(Section, frozen=True):
    """GPU idle time the trace cannot attribute (trace quality): named instead of "unexplained"."""

    required, allow_empty = ("label", "us"), False
    check: Union[str, _U] = UNSET  # the trace-quality check that names it
    label: Union[str, _U] = UNSET
    us: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET
    frac_of_step: Union[Num, _U] = UNSET
    by_part_us: Union[dict[str, Num], _U] = UNSET


class Account(Section, frozen=True):
    """The GPU idle time of the analysed steps: what each active finding claims, per idle part, and the
    unexplained rest. The parts add up to the idle time."""

    required = ("idle_us",)
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


class MemoryStep(Section, frozen=True):
    required, allow_empty = ("step",), False
    step: Union[int, _U] = UNSET
    start_allocated_bytes: Union[Num, None, _U] = UNSET
    peak_allocated_bytes: Union[Num, None, _U] = UNSET
    peak_reserved_bytes: Union[Num, None, _U] = UNSET


class MemoryDevice(Section, frozen=True):
    required, allow_empty = ("device",), False
    device: Union[int, None, _U] = UNSET
    capacity_bytes: Union[Num, None, _U] = UNSET
    peak_allocated_bytes: Union[Num, None, _U] = UNSET
    peak_reserved_bytes: Union[Num, None, _U] = UNSET
    start_allocated_bytes: Union[Num, None, _U] = UNSET
    headroom_bytes: Union[Num, None, _U] = UNSET
    per_step: Union[list[MemoryStep], _U] = UNSET


class BatchFit(Section, frozen=True):
    """The largest micro-batch under the margin, and the accumulation that keeps the effective batch."""

    required = ("factor", "max_factor")
    batch: Union[int, None, _U] = UNSET
    factor: Union[int, _U] = UNSET
    max_factor: Union[Num, _U] = UNSET
    accumulation: Union[int, None, _U] = UNSET
    current_batch: Union[int, None, _U] = UNSET
    current_accumulation: Union[int, None, _U] = UNSET
    fixed_bytes: Union[Num, _U] = UNSET
    per_batch_bytes: Union[Num, _U] = UNSET
    capacity_bytes: Union[Num, _U] = UNSET
    margin_frac: Union[Num, _U] = UNSET
    predicted_peak_bytes: Union[Num, _U] = UNSET
    measured: Union[list[str], _U] = UNSET
    assumed: Union[list[str], _U] = UNSET
    batch_name: Union[str, _U] = UNSET
    accumulation_name: Union[str, _U] = UNSET
    # who recommends `factor`: the launch-bound fix's replay sweep (whatif/batch.py), or None: no cause
    # asks for a larger batch, so `factor` is 1 and only max_factor is a figure
    recommended_by: Union[str, None, _U] = UNSET


class Memory(Section, frozen=True):
    """Device memory per step, or (source "") the reason there is no figure and the capture option that adds one."""

    required = ("source",)
    source: Union[str, _U] = UNSET  # "trace" | "capture" | "" (no figure)
    margin_frac: Union[Num, _U] = UNSET
    reason: Union[str, _U] = UNSET
    hint: Union[str, _U] = UNSET
    devices: Union[list[MemoryDevice], _U] = UNSET
    batch_fit: Union[BatchFit, _U] = UNSET


# --- per-shape efficiency against the roofline --------------------------------------------------------


class ShapeRow(Section, frozen=True):
    """One (op, input shapes, input types) group of the analysed steps against the roofline; None: not modelled."""

    required, allow_empty = ("op",), False
    op: Union[str, _U] = UNSET
    family: Union[str, _U] = UNSET
    shape: Union[str, _U] = UNSET
    dtype: Union[str, _U] = UNSET
    dims: Union[dict[str, Any], _U] = UNSET
    calls_per_step: Union[Num, _U] = UNSET
    gpu_us_per_step: Union[Num, _U] = UNSET
    us_per_call: Union[Num, _U] = UNSET
    gflops_per_call: Union[Num, None, _U] = UNSET
    mbytes_per_call: Union[Num, None, _U] = UNSET
    tflops: Union[Num, None, _U] = UNSET
    tbps: Union[Num, None, _U] = UNSET
    intensity: Union[Num, None, _U] = UNSET
    peak_tflops: Union[Num, None, _U] = UNSET
    peak_unit: Union[str, None, _U] = UNSET  # what peak_tflops is the peak of ("bf16 matrix", "fp32 vector")
    peak_tbps: Union[Num, None, _U] = UNSET
    bound: Union[str, None, _U] = UNSET
    share_of_peak: Union[Num, None, _U] = UNSET
    roofline_us_per_step: Union[Num, None, _U] = UNSET
    kernel: Union[str, _U] = UNSET
    note: Union[str, _U] = UNSET


class Efficiency(Section, frozen=True):
    peaks: Union[Peaks, None, _U] = UNSET  # None: no peak table entry for this GPU
    kernel_us_per_step: Union[Num, _U] = UNSET
    modelled_frac: Union[Num, _U] = UNSET
    rows_total: Union[int, _U] = UNSET
    rows: Union[list[ShapeRow], _U] = UNSET


# --- many ranks: collectives aligned across ranks, and the rank that gates the step -------------------


class RankAlignment(Section, frozen=True):
    required, allow_empty = ("rank",), False
    rank: Union[int, _U] = UNSET
    last_arrivals: Union[int, _U] = UNSET
    caused_wait_us_per_step: Union[Num, _U] = UNSET
    job_cost_us_per_step: Union[Num, _U] = UNSET
    wait_us_per_step: Union[Num, _U] = UNSET
    transfer_us_per_step: Union[Num, _U] = UNSET
    clock_offset_us: Union[Num, _U] = UNSET


class CollectiveRow(Section, frozen=True):
    index: Union[int, _U] = UNSET
    group: Union[int, _U] = UNSET
    collective: Union[str, _U] = UNSET
    arrival_skew_us: Union[Num, _U] = UNSET
    last_rank: Union[int, None, _U] = UNSET
    job_cost_us: Union[Num, _U] = UNSET


class CrossRank(Section, frozen=True):
    required = ("matched", "ranks")
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


Span = Annotated[list[Num], msgspec.Meta(min_length=2, max_length=2)]  # [start, end]: JSON has no tuples


class TimelineSample(Section, frozen=True):
    """One representative step's intervals per timeline part, for the HTML chart."""

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


class WhatIfStep(Section, frozen=True):
    required, allow_empty = ("step", "measured_us", "predicted_us"), False
    step: Union[int, _U] = UNSET
    measured_us: Union[Num, _U] = UNSET
    predicted_us: Union[Num, _U] = UNSET
    gpu_work_us: Union[Num, _U] = UNSET  # the busiest stream's GPU work launched in the step, after the fixes
    gpu_floor_us: Union[Num, _U] = UNSET  # the step with no host time left: the GPU work, less the lag the window shows


class WhatIfRun(Section, frozen=True):
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


Setting = Union[str, int, float, bool, list[str]]


def known(value: Any, default: Any = None) -> Any:
    """A section field's value, or `default` where the key was absent (UNSET)."""
    return default if value is UNSET else value


def py(value: Any) -> Any:
    """A value as a section stores it: a numpy scalar becomes the same Python number (msgspec does not
    encode numpy scalars); anything else is returned as it is. For the producers that build sections."""
    return value.item() if hasattr(value, "item") else value


class QualityCheck(Section, frozen=True):
    """One trace-quality check: its status (ok | limited | poor), what it measured over the analysed
    steps, its threshold and what the report does about it. One more check is one more row."""

    required, allow_empty = ("check", "status", "summary"), False
    check: Union[str, _U] = UNSET
    status: Union[str, _U] = UNSET
    short: Union[str, _U] = UNSET  # the phrase the trust line uses ("" when ok)
    summary: Union[str, _U] = UNSET
    effect: Union[str, _U] = UNSET
    threshold: Union[str, _U] = UNSET
    values: Union[dict[str, Num], _U] = UNSET
    steps: Union[list[int], _U] = UNSET  # the steps it names (warm-up, dropped kernels)


class TraceQuality(Section, frozen=True):
    """Can the numbers be trusted: the overall status (good | limited | poor), the trust line shown at the
    top of the verdict, and the checks."""

    required = ("status", "line")
    status: Union[str, _U] = UNSET
    line: Union[str, _U] = UNSET
    checks: Union[list[QualityCheck], _U] = UNSET
