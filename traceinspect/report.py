"""Report: the one result object every renderer and `diff` consume; JSON is its canonical form.

Owns to_dict()/from_dict() and the schema version. Must not read trace tables (analyze.py fills it).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Report:
    trace: dict                                   # files, gpu, rank, profiler options, environment
    steps: dict                                   # count, source, mean/median/min/max/std, per_step rows
    breakdown: dict                               # part -> {"us", "frac", "per_step_us"}
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    verdict: dict = field(default_factory=dict)
    top_kernels: list[dict] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)   # per-rank summaries when several ranks were analysed
    timeline_sample: dict = field(default_factory=dict)  # one representative step's intervals (optional, additive)
    efficiency: dict = field(default_factory=dict)  # per-shape table against the roofline (optional, additive)
    account: dict = field(default_factory=dict)   # GPU idle time: what each finding claims + unexplained
    memory: dict = field(default_factory=dict)    # device memory per step, headroom, batch fit (optional, additive)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": self.schema_version,
            "tool": {"name": "traceinspect", "version": _version()},
            "trace": self.trace,
            "steps": self.steps,
            "breakdown": self.breakdown,
            "verdict": self.verdict,
            "findings": [dict(f.to_dict(), severity=severity(f.time_lost_frac)) for f in self.findings],
            "skipped": [s.to_dict() for s in self.skipped],
            "failures": [f.to_dict() for f in self.failures],
            "warnings": list(self.warnings),
            "top_kernels": self.top_kernels,
            "ranks": self.ranks,
        }
        if self.account:  # absent for CPU-only traces and for reports saved before schema 2
            d["account"] = self.account
        if self.timeline_sample:  # optional key: reports without it keep their exact shape
            d["timeline_sample"] = self.timeline_sample
        if self.efficiency:
            d["efficiency"] = self.efficiency
        if self.memory:  # optional key, as timeline_sample
            d["memory"] = self.memory
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        if not isinstance(d, dict) or "findings" not in d or "breakdown" not in d:
            raise ValueError("not a traceinspect JSON report")
        return cls(
            trace=d.get("trace", {}), steps=d.get("steps", {}), breakdown=d.get("breakdown", {}),
            findings=[Finding.from_dict({k: v for k, v in f.items() if k != "severity"}) for f in d["findings"]],
            skipped=[Skipped(**s) for s in d.get("skipped", [])],
            failures=[Failure(**f) for f in d.get("failures", [])],
            warnings=list(d.get("warnings", [])), verdict=d.get("verdict", {}),
            top_kernels=d.get("top_kernels", []), ranks=d.get("ranks", []),
            timeline_sample=d.get("timeline_sample") or {}, account=d.get("account") or {},
            efficiency=d.get("efficiency") if isinstance(d.get("efficiency"), dict) else {},
            memory=d["memory"] if isinstance(d.get("memory"), dict) else {},
            schema_version=int(d.get("schema_version", SCHEMA_VERSION)))


def _version() -> str:
    from . import __version__
    return __version__
