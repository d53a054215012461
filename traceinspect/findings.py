"""Findings and their parts: frozen, keyword-only dataclasses. No logic beyond (de)serialisation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One measured number: what it is, its value and unit, and the window it was measured over."""

    label: str
    value: float | int | str
    unit: str = ""
    window: str = ""


@dataclass(frozen=True, kw_only=True)
class EventRef:
    """An exemplar event a user can find in Perfetto / chrome://tracing."""

    name: str
    ts_us: float  # relative to the start of the trace window (see Report.trace.origin_us)
    dur_us: float
    track: str  # e.g. "GPU 0 stream 7" or "CPU thread 25738"


@dataclass(frozen=True, kw_only=True)
class Finding:
    code: str
    name: str
    title: str
    time_lost_us: float  # recoverable wall time over the analysed window, >= 0
    time_lost_frac: float = 0.0  # of the analysed window (sum of step times)
    time_lost_per_step_us: float = 0.0
    confidence: str = "medium"  # "high" | "medium" | "low"
    evidence: tuple[Evidence, ...] = ()
    fix: str = ""
    events: tuple[EventRef, ...] = ()
    upper_bound: bool = False  # the estimate is an upper bound, not a point estimate
    # GPU idle time (us over the window) this finding claims, per timeline idle part ("idle_cpu": ...).
    # Part of time_lost_us; the explained-time account adds these up. Empty for busy-time causes.
    idle_claims_us: dict[str, float] = field(default_factory=dict)
    # transient, not serialised: part -> (starts, ends, factor), the claimed idle intervals (scaled by
    # factor <= 1), so the account can split each claim per step
    claim_sets: dict = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "claim_sets"}
        d["evidence"] = [asdict(e) for e in self.evidence]
        d["events"] = [asdict(e) for e in self.events]
        d["idle_claims_us"] = dict(self.idle_claims_us)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        d = dict(d)
        d["evidence"] = tuple(Evidence(**e) for e in d.get("evidence", ()))
        d["events"] = tuple(EventRef(**e) for e in d.get("events", ()))
        # tolerant of reports saved before idle_claims_us (absent) and of malformed values; the schema-2/3
        # keys masked_by and projected_lost_us (a detector's own later-cost rule, gone in schema 4) drop
        ic = d.get("idle_claims_us")
        d["idle_claims_us"] = (
            {str(k): float(v) for k, v in ic.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if isinstance(ic, dict)
            else {}
        )
        d.pop("claim_sets", None)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A detector that does not apply to this trace (not an error)."""

    code: str
    name: str
    reason: str
    checked: bool = False  # True: the signature is present but below the detector's threshold

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A detector that crashed; shown in every format, never hides the other findings."""

    code: str
    name: str
    error: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def numbered(findings) -> list[tuple[int, Finding]]:
    """The one numbering every output uses for a report's findings (text, Markdown, HTML, annotate's
    tracks): 1..n in rank order."""
    return list(enumerate(findings, 1))
