"""Report: the one result object every renderer and `diff` consume; JSON is its canonical form.

Owns to_dict()/from_dict() and the schema version. Must not read trace tables (analyze.py fills it).
"""

from __future__ import annotations

import numbers
from typing import Any

import msgspec
import msgspec.inspect

from .findings import Failure, Finding, Skipped
from .sections import (  # noqa: F401 (re-exported: the report model's sections)
    Account,
    AccountArtifact,
    AccountPart,
    AccountStep,
    BatchFit,
    BusyCause,
    CollectiveRow,
    CrossRank,
    Efficiency,
    FixStep,
    Gpu,
    Identity,
    known,
    Memory,
    MemoryDevice,
    MemoryStep,
    Num,
    Part,
    Peaks,
    QualityCheck,
    RankAlignment,
    RankSummary,
    Rediagnosed,
    ReplayEdges,
    Section,
    Setting,
    ShapeRow,
    Span,
    SpeedOfLight,
    StepRow,
    Steps,
    TimelineSample,
    TopKernel,
    TraceInfo,
    TraceQuality,
    UnexplainedReason,
    UNSET,
    Verdict,
    WhatIf,
    WhatIfRun,
    WhatIfStep,
)

# 2: findings ranked by confidence-weighted time lost; account, masked_by, idle claims. 3: the keys every
# report of this version writes are required (a section's rows whole; see _migrate for older reports).
# 4: the finding keys masked_by and projected_lost_us are gone (what a cause costs once other fixes are in
# is the verdict's re-diagnosis, by replay); verdict.next_bottlenecks names the re-diagnosed causes
SCHEMA_VERSION = 4
KEYS_REQUIRED_SINCE = 3  # reports of older versions may lack keys: _migrate


def severity(frac: float) -> str:
    """Derived from the share of the window lost, so ranking is consistent across detectors."""
    if isinstance(frac, bool) or not isinstance(frac, numbers.Real):  # a malformed saved report
        return "low"
    if frac >= 0.20:
        return "high"
    if frac >= 0.05:
        return "medium"
    return "low"


_INT64 = (-(1 << 63), (1 << 63) - 1)
_MAX_DEPTH = 32  # a report this version writes nests 6 deep


def _check_bounds(doc: Any) -> None:
    """Every integer of a saved report inside int64, and no deeper nesting than a report has: a ValueError
    naming the place (`$.steps.count`), never an OverflowError deep inside a renderer. Iterative, so no
    nesting can exhaust the stack."""
    todo = [(doc, "$", 0)]
    while todo:
        o, where, depth = todo.pop()
        if depth > _MAX_DEPTH:
            raise ValueError(f"nested deeper than a report ({_MAX_DEPTH} levels) at `{where}`")
        if isinstance(o, dict):
            todo.extend((v, f"{where}.{k}", depth + 1) for k, v in o.items())
        elif isinstance(o, list):
            todo.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(o))
        elif isinstance(o, int) and not isinstance(o, bool) and not _INT64[0] <= o <= _INT64[1]:
            raise ValueError(f"an integer out of range (beyond 64 bits) at `{where}`")


# --- trace quality: what this trace can and cannot show (facts/trace_quality.py, docs/trace-quality.md) ----


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one analysis, immutable: change it with msgspec.structs.replace. Every section is
    typed; an optional section that is empty (falsy) is left out of the JSON."""

    trace: TraceInfo = msgspec.field(default_factory=TraceInfo)
    steps: Steps = msgspec.field(default_factory=Steps)
    breakdown: dict[str, Part] = {}  # part -> Part
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    failures: list[Failure] = []
    warnings: list[str] = []
    verdict: Verdict = msgspec.field(default_factory=Verdict)
    top_kernels: list[TopKernel] = []
    ranks: list[RankSummary] = []  # per-rank summaries when several ranks were analysed
    # optional sections (additive: reports without them keep their exact shape)
    timeline_sample: TimelineSample = msgspec.field(default_factory=TimelineSample)  # the HTML chart's step
    efficiency: Efficiency = msgspec.field(default_factory=Efficiency)  # per-shape table against the roofline
    account: Account = msgspec.field(default_factory=Account)  # GPU idle time: claimed by findings + unexplained
    memory: Memory = msgspec.field(default_factory=Memory)  # device memory per step, headroom, batch fit
    cross_rank: CrossRank = msgspec.field(default_factory=CrossRank)  # collectives aligned across ranks
    trace_quality: TraceQuality = msgspec.field(default_factory=TraceQuality)  # checked before the detectors
    settings: dict[str, Setting] = {}  # the non-default configuration used
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": self.schema_version,
            "tool": {"name": "traceinspect", "version": _version()},
            "trace": self.trace.to_dict(),
            "steps": self.steps.to_dict(),
            "breakdown": {k: p.to_dict() for k, p in self.breakdown.items()},
            "verdict": self.verdict.to_dict(),
            "findings": [dict(f.to_dict(), severity=severity(f.time_lost_frac)) for f in self.findings],
            "skipped": [s.to_dict() for s in self.skipped],
            "failures": [f.to_dict() for f in self.failures],
            "warnings": list(self.warnings),
            "top_kernels": [k.to_dict() for k in self.top_kernels],
            "ranks": [r.to_dict() for r in self.ranks],
        }
        for key in OPTIONAL_SECTIONS:
            if getattr(self, key):
                d[key] = getattr(self, key).to_dict()
        if self.settings:
            d["settings"] = msgspec.to_builtins(self.settings)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        """A Report from its JSON form (a saved report, a cache entry): untrusted input, checked
        against the model itself (types, and each section's required fields) before anything reads it.
        A wrong or missing key is a ValueError that says where (`$.trace.rank`), never an exception from
        deep inside a renderer. Keys this version does not know are dropped."""
        if not isinstance(d, dict):
            raise ValueError(f"a report is a JSON object, not {type(d).__name__}")
        for key in REQUIRED_KEYS:
            if key not in d:
                raise ValueError(f"Object missing required field `{key}`")
        _check_bounds(d)
        # a section written as null reads as absent, as {} does
        d = {k: v for k, v in d.items() if not (v is None and k in SECTIONS)}
        v = d.get("schema_version")
        if isinstance(v, int) and not isinstance(v, bool) and v < KEYS_REQUIRED_SINCE:
            d = _migrate(d)
        try:
            r = msgspec.convert(d, cls)
        except msgspec.ValidationError as e:
            raise ValueError(str(e)) from None
        except UnicodeError:  # a lone surrogate (JSON allows "\\udcff"): msgspec cannot even quote the value
            raise ValueError("text that is not valid Unicode (a lone surrogate)") from None
        if not 1 <= r.schema_version <= SCHEMA_VERSION:  # older versions are read: their keys are a subset
            raise ValueError(f"schema_version is {r.schema_version}; this traceinspect reads 1 to {SCHEMA_VERSION}")
        return r


def _migrate(doc: dict) -> dict:
    """A report saved before schema 3, whose sections could lack keys this version requires: each
    missing key whose value may be null (a GPU's SM count, a file size, a peak) reads as null, "not
    recorded by that version"; one that cannot be null (a name, a count) stays missing, so the report is
    refused naming it (`$.trace.gpu.rocm`). Migrated once, here: nothing after from_dict sees the old
    shape. A copy: the caller's dict is not changed."""
    import copy

    doc = copy.deepcopy(doc)
    todo = [(doc, _info())]
    while todo:
        obj, ti = todo.pop()
        if isinstance(ti, msgspec.inspect.UnionType):
            todo += [(obj, t) for t in ti.types if isinstance(t, _CONTAINERS)]
        elif isinstance(ti, msgspec.inspect.StructType) and isinstance(obj, dict) and obj:
            need = set(getattr(ti.cls, "required", ())) | {f.name for f in ti.fields if f.required}
            for f in ti.fields:
                if f.encode_name in obj:
                    todo.append((obj[f.encode_name], f.type))
                elif f.name in need and _nullable(f.type):
                    obj[f.encode_name] = None
        elif isinstance(ti, msgspec.inspect.ListType) and isinstance(obj, list):
            todo += [(x, ti.item_type) for x in obj]
        elif isinstance(ti, msgspec.inspect.DictType) and isinstance(obj, dict):
            todo += [(x, ti.value_type) for x in obj.values()]
    return doc


_CONTAINERS = (msgspec.inspect.StructType, msgspec.inspect.ListType, msgspec.inspect.DictType)


def _nullable(t) -> bool:
    types = t.types if isinstance(t, msgspec.inspect.UnionType) else (t,)
    return any(isinstance(x, msgspec.inspect.NoneType) for x in types)


def _info():
    global _INFO
    if _INFO is None:
        _INFO = msgspec.inspect.type_info(Report)
    return _INFO


_INFO = None


_SECTION_TYPES = {c.__name__: c for c in Section.__subclasses__()}  # every typed section, by name
REQUIRED_KEYS = ("breakdown", "findings", "schema_version")  # every report has these (the JSON Schema says so)
OPTIONAL_SECTIONS = ("account", "timeline_sample", "efficiency", "memory", "cross_rank", "trace_quality")
SECTIONS = ("trace", "steps", "verdict") + OPTIONAL_SECTIONS


def _version() -> str:
    from . import __version__

    return __version__


def json_schema() -> dict[str, Any]:
    """The JSON Schema of Report.to_dict(), generated from the model (docs/report.schema.json holds a copy,
    checked by tests/test_report_schema.py). Three things are added to msgspec's schema of the Structs:
    the `tool` key and each finding's derived `severity` (written by to_dict, not stored), and the keys
    a report must have (those from_dict requires); Finding's transient claim_sets is not serialised."""
    s = msgspec.json.decode(msgspec.json.encode(msgspec.json.schema(Report)))  # tuples as lists, as JSON has them
    defs = s["$defs"]
    rep = defs["Report"]
    rep["properties"]["tool"] = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
    }
    rep["required"] = ["breakdown", "findings", "schema_version"]
    for name, d in defs.items():  # each section's `required` rule (Section.__post_init__), as JSON Schema
        cls = _SECTION_TYPES.get(name)
        if cls is None:
            continue
        if cls.required and cls.allow_empty:
            d["if"], d["then"] = {"minProperties": 1}, {"required": list(cls.required)}
        elif cls.required:
            d["required"] = sorted(set(d.get("required", [])) | set(cls.required))
    v = defs["Verdict"]
    v["if"] = {"properties": {"top": {"type": "string"}}, "required": ["top"]}
    v["then"] = {
        "required": list(Verdict.required_with_top),
        "properties": {f: {"not": {"type": "null"}} for f in Verdict.required_with_top},
    }
    fin = defs["Finding"]
    fin["properties"].pop("claim_sets", None)
    fin["properties"]["severity"] = {"enum": ["high", "medium", "low"]}
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "traceinspect report"
    return s


if __name__ == "__main__":  # python -m traceinspect.report > docs/report.schema.json
    import json

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
