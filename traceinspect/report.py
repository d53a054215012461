"""Report: the one result object every renderer and `diff` consume; JSON is its canonical form.

Owns to_dict()/from_dict() and the schema version. Must not read trace tables (analyze.py fills it).
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Union

import msgspec

from .findings import Failure, Finding, Skipped

SCHEMA_VERSION = 2   # 2: findings ranked by confidence-weighted time lost; account, masked_by, idle claims


def severity(frac: float) -> str:
    """Derived from the share of the window lost, so ranking is consistent across detectors."""
    if isinstance(frac, bool) or not isinstance(frac, numbers.Real):   # a malformed saved report
        return "low"
    if frac >= 0.20:
        return "high"
    if frac >= 0.05:
        return "medium"
    return "low"


Num = Union[int, float]   # JSON has one number type: an int stays an int, a float a float (byte-identical output)
_U = msgspec.UnsetType
UNSET = msgspec.UNSET


class Section(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """A typed report section. A field is UNSET where the key is absent from the JSON (a report saved by
    an older version, or a key written only sometimes), so to_dict() writes exactly the keys it read."""

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
    name: Union[str, _U] = UNSET
    fp32_tflops: Union[Num, None, _U] = UNSET
    tf32_tflops: Union[Num, None, _U] = UNSET
    half_tflops: Union[Num, None, _U] = UNSET
    approximate: Union[bool, _U] = UNSET


class Gpu(Section, frozen=True):
    name: Union[str, _U] = UNSET
    id: Union[int, None, _U] = UNSET
    arch: Union[str, None, _U] = UNSET
    compute_capability: Union[str, None, _U] = UNSET
    num_sms: Union[int, None, _U] = UNSET
    memory_bytes: Union[int, None, _U] = UNSET
    rocm: Union[bool, _U] = UNSET
    peaks: Union[Peaks, None, _U] = UNSET


class TraceInfo(Section, frozen=True):
    """Files, GPU, rank, profiler options, environment."""
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
    step: Union[int, _U] = UNSET
    start_us: Union[Num, _U] = UNSET
    dur_us: Union[Num, _U] = UNSET
    breakdown_us: Union[dict[str, Num], _U] = UNSET


class Steps(Section, frozen=True):
    """Count, source, mean/median/min/max/std of the step time, and one row per step. Empty (every
    field UNSET) for a report saved without steps."""
    count: Union[int, _U] = UNSET
    source: Union[str, None, _U] = UNSET
    mean_us: Union[Num, _U] = UNSET
    median_us: Union[Num, _U] = UNSET
    min_us: Union[Num, _U] = UNSET
    max_us: Union[Num, _U] = UNSET
    std_us: Union[Num, _U] = UNSET
    window_us: Union[Num, _U] = UNSET
    per_step: Union[list[StepRow], _U] = UNSET


class Part(Section, frozen=True):
    """One part of the timeline breakdown: total over the window, share of it, mean per step."""
    us: Union[Num, _U] = UNSET
    label: Union[str, _U] = UNSET
    frac: Union[Num, _U] = UNSET
    per_step_us: Union[Num, _U] = UNSET


class TopKernel(Section, frozen=True):
    name: Union[str, _U] = UNSET
    count: Union[int, _U] = UNSET
    total_us: Union[Num, _U] = UNSET
    median_us: Union[Num, _U] = UNSET
    frac_of_kernel_time: Union[Num, _U] = UNSET


class RankSummary(Section, frozen=True):
    """One rank of a multi-rank reduction; the collective fields only where collectives were aligned."""
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


def known(value: Any, default: Any = None) -> Any:
    """A section field's value, or `default` where the key was absent (UNSET)."""
    return default if value is UNSET else value


def _np(o: Any) -> Any:
    if hasattr(o, "item"):   # numpy scalars: the same value as a Python number
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def typed(cls: type, value: Any) -> Any:
    """A section (or list/dict of sections) from its JSON-shaped form; numpy scalars become Python numbers."""
    return msgspec.convert(msgspec.to_builtins(value, enc_hook=_np), cls)


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one analysis, immutable: change it with msgspec.structs.replace."""

    trace: TraceInfo = msgspec.field(default_factory=TraceInfo)
    steps: Steps = msgspec.field(default_factory=Steps)
    breakdown: dict[str, Part] = {}               # part -> Part
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    failures: list[Failure] = []
    warnings: list[str] = []
    verdict: dict[str, Any] = {}
    top_kernels: list[TopKernel] = []
    ranks: list[RankSummary] = []                 # per-rank summaries when several ranks were analysed
    timeline_sample: dict[str, Any] = {}          # one representative step's intervals (optional, additive)
    efficiency: dict[str, Any] = {}               # per-shape table against the roofline (optional, additive)
    account: dict[str, Any] = {}                  # GPU idle time: what each finding claims + unexplained
    memory: dict[str, Any] = {}                   # device memory per step, headroom, batch fit (optional)
    cross_rank: dict[str, Any] = {}               # collectives aligned across ranks, the gating rank (optional)
    settings: dict[str, Any] = {}                 # the non-default configuration used (optional, additive)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": self.schema_version,
            "tool": {"name": "traceinspect", "version": _version()},
            "trace": self.trace.to_dict(),
            "steps": self.steps.to_dict(),
            "breakdown": {k: p.to_dict() for k, p in self.breakdown.items()},
            "verdict": self.verdict,
            "findings": [dict(f.to_dict(), severity=severity(f.time_lost_frac)) for f in self.findings],
            "skipped": [s.to_dict() for s in self.skipped],
            "failures": [f.to_dict() for f in self.failures],
            "warnings": list(self.warnings),
            "top_kernels": [k.to_dict() for k in self.top_kernels],
            "ranks": [r.to_dict() for r in self.ranks],
        }
        if self.account:  # absent for CPU-only traces and for reports saved before schema 2
            d["account"] = self.account
        if self.timeline_sample:  # optional key: reports without it keep their exact shape
            d["timeline_sample"] = self.timeline_sample
        if self.efficiency:
            d["efficiency"] = self.efficiency
        if self.memory:  # optional key, as timeline_sample
            d["memory"] = self.memory
        if self.cross_rank:  # optional key: only a multi-rank reduction with aligned collectives has it
            d["cross_rank"] = self.cross_rank
        if self.settings:  # optional key: only where a setting differs from the defaults
            d["settings"] = self.settings
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        """A Report from its JSON form (a saved report, a cache entry): untrusted input. Every key the
        renderers, `diff` and the CLI read is checked for its type first; anything else is a
        ValueError that says where (`$.trace.rank`), never an exception from deep inside a renderer.
        Keys of the typed sections this version does not know are dropped."""
        _check_shape(d)
        try:
            return cls(
                trace=typed(TraceInfo, d.get("trace") or {}), steps=typed(Steps, d.get("steps") or {}),
                breakdown=typed(dict[str, Part], d["breakdown"]),
                findings=msgspec.convert(d["findings"], list[Finding]),
                skipped=msgspec.convert(d.get("skipped", []), list[Skipped]),
                failures=msgspec.convert(d.get("failures", []), list[Failure]),
                warnings=list(d.get("warnings", [])), verdict=d.get("verdict") or {},
                top_kernels=typed(list[TopKernel], d.get("top_kernels", [])),
                ranks=typed(list[RankSummary], d.get("ranks", [])),
                timeline_sample=d.get("timeline_sample") or {}, account=d.get("account") or {},
                efficiency=d.get("efficiency") if isinstance(d.get("efficiency"), dict) else {},
                memory=d["memory"] if isinstance(d.get("memory"), dict) else {},
                cross_rank=d["cross_rank"] if isinstance(d.get("cross_rank"), dict) else {},
                settings=d.get("settings") or {},
                schema_version=d["schema_version"])
        except (msgspec.ValidationError, TypeError) as e:   # a key the shape check lets through but the model does not
            raise ValueError(f"a report key has the wrong type: {e}") from None

    # --- renderers (traceinspect.render): one method per format -----------------------------------
    def to_text(self, *, width: int = 100, color: bool = False) -> str:
        from .render import text
        return text.render(self, width=width, color=color)

    def to_markdown(self, *, width: int = 100) -> str:
        from .render import markdown
        return markdown.render(self, width=width)

    def to_html(self, *, width: int = 100) -> str:
        from .render import html
        return html.render(self, width=width)

    def to_json(self) -> str:
        from .render import json
        return json.render(self)


# --- the shape of a report's JSON form, checked on every read (one declaration, used by from_dict) -----
# Fields without a default must be present; the others are optional but typed when present. A float
# field accepts an int (JSON has one number type); an int field takes no bool and no float.

class _Peaks(msgspec.Struct):
    name: str
    fp32_tflops: Optional[float] = None
    tf32_tflops: Optional[float] = None
    half_tflops: Optional[float] = None
    approximate: bool = False


class _Gpu(msgspec.Struct):
    name: str
    id: Optional[int] = None
    arch: Optional[str] = None
    compute_capability: Optional[str] = None
    num_sms: Optional[int] = None
    memory_bytes: Optional[int] = None
    rocm: bool = False
    peaks: Optional[_Peaks] = None


class _Trace(msgspec.Struct):
    file: str = ""
    file_bytes: Optional[int] = None
    json_bytes: Optional[int] = None
    events: Optional[int] = None
    lost_bytes: Optional[int] = None
    dropped_events: Optional[int] = None
    rank: int = 0
    rank_source: Optional[str] = None
    world_size: Optional[int] = None
    gpu: Optional[_Gpu] = None
    gpu_count_in_trace: Optional[int] = None
    window: str = ""
    profiler: Optional[dict[str, Any]] = None
    profiler_source: Optional[dict[str, Any]] = None
    versions: Optional[dict[str, Any]] = None
    framework: Optional[str] = None
    run_config: Optional[dict[str, Any]] = None
    run_framework: Optional[dict[str, Any]] = None
    origin_us: Optional[float] = None
    base_time_ns: Optional[int] = None
    has_gpu: bool = False
    has_cpu: bool = False


class _StepRow(msgspec.Struct):
    step: int
    start_us: float
    dur_us: float
    breakdown_us: dict[str, float] = {}


class _Steps(msgspec.Struct):
    count: int
    source: str
    mean_us: float
    median_us: float
    min_us: float
    max_us: float
    std_us: float = 0.0
    window_us: float = 0.0
    per_step: list[_StepRow] = []


class _Part(msgspec.Struct):
    us: float
    label: str = ""
    frac: float = 0.0
    per_step_us: float = 0.0


class _VerdictTop(msgspec.Struct):
    top: str
    top_title: str
    median_step_us: float
    expected_step_us: float
    expected_from: list[str]
    assumption: str
    top_per_step_us: Optional[float] = None
    top_frac: Optional[float] = None


class _VerdictNone(msgspec.Struct):
    top: None = None
    headline: str = ""
    median_step_us: Optional[float] = None


class _TopKernel(msgspec.Struct):
    name: str
    count: int
    total_us: float
    median_us: float
    frac_of_kernel_time: float


class _RankRow(msgspec.Struct):
    rank: int
    file: str
    median_step_us: float
    mean_step_us: float
    steps: int
    slowest: bool
    gpu_busy_frac: Optional[float] = None
    top_finding: Optional[str] = None


class _TimelineSample(msgspec.Struct):
    intervals: dict[str, list[tuple[float, float]]] = {}
    step: Optional[int] = None
    index: Optional[int] = None
    start_us: Optional[float] = None
    dur_us: Optional[float] = None
    device: Optional[int] = None
    resolution_us: Optional[float] = None
    choice: str = ""
    dropped: int = 0


class _Report(msgspec.Struct):
    schema_version: int
    findings: list[Finding]
    breakdown: dict[str, _Part]
    trace: _Trace = msgspec.field(default_factory=_Trace)
    skipped: list[Skipped] = []
    failures: list[Failure] = []
    warnings: list[str] = []
    top_kernels: list[_TopKernel] = []
    ranks: list[_RankRow] = []
    settings: dict[str, Union[str, int, float, bool, list[str]]] = {}


def _check_shape(d: Any) -> None:
    """ValueError naming the first key whose type is wrong or that is missing (msgspec's path)."""
    if not isinstance(d, dict):
        raise ValueError(f"a report is a JSON object, not {type(d).__name__}")
    _convert(d, _Report, "")
    for key, shape in (("steps", _Steps), ("timeline_sample", _TimelineSample)):
        if d.get(key) is not None and d.get(key) != {}:  # {} means absent (no steps, no GPU)
            _convert(d[key], shape, key)
    v = d.get("verdict")
    if v is not None and v != {}:
        _convert(v, _VerdictTop if isinstance(v, dict) and v.get("top") is not None else _VerdictNone, "verdict")
    if not 1 <= d["schema_version"] <= SCHEMA_VERSION:  # older versions are read: their keys are a subset
        raise ValueError(f"schema_version is {d['schema_version']}; this traceinspect reads 1 to {SCHEMA_VERSION}")


def _convert(value: Any, shape: type, where: str) -> None:
    try:
        msgspec.convert(value, shape)
    except msgspec.ValidationError as e:
        msg = str(e)
        if where:
            msg = msg.replace("- at `$", f"- at `$.{where}") if "- at `$" in msg else f"{msg} - at `$.{where}`"
        raise ValueError(msg) from None
    except UnicodeError:  # a lone surrogate (JSON allows "\\udcff"): msgspec cannot even quote the value
        raise ValueError(f"text that is not valid Unicode (a lone surrogate) - at `${'.' + where if where else ''}`") from None


def _version() -> str:
    from . import __version__
    return __version__


def json_schema() -> dict[str, Any]:
    """The JSON Schema of Report.to_dict(), generated from the model (docs/report.schema.json holds a copy,
    checked by tests/test_report_schema.py). Three things are added to msgspec's schema of the Structs:
    the `tool` key and each finding's derived `severity` (written by to_dict, not stored), and the keys
    a report must have (those from_dict requires); Finding's transient claim_sets is not serialised."""
    s = msgspec.json.decode(msgspec.json.encode(msgspec.json.schema(Report)))   # tuples as lists, as JSON has them
    defs = s["$defs"]
    rep = defs["Report"]
    rep["properties"]["tool"] = {"type": "object", "properties": {"name": {"type": "string"},
                                                                  "version": {"type": "string"}}}
    rep["required"] = ["breakdown", "findings", "schema_version"]
    fin = defs["Finding"]
    fin["properties"].pop("claim_sets", None)
    fin["properties"]["severity"] = {"enum": ["high", "medium", "low"]}
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "traceinspect report"
    return s


if __name__ == "__main__":   # python -m traceinspect.report > docs/report.schema.json
    import json
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
