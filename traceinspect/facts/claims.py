"""Explicit time claims: which detector owns which GPU idle time, resolved in one place.

Every finding's time lost is made of GPU idle time it claims, per timeline idle part (idle_launch,
idle_cpu, ...; trace/timeline.py), and the explained-time account adds the claims up, so two findings
must never claim the same interval. Each detector declares, as class variables:

- `claims_parts`: the idle parts its findings may claim (Detector.finding refuses any other);
- `reserves`: the idle parts in which it reserves intervals ahead of the detectors after it, and
  `reserved(trace)` returns those intervals (host spans whose GPU idle it owns, e.g. the allocation
  calls allocator-churn owns, whatever the host-late rule labelled the gap).

ORDER states, per idle part, who comes first: a detector claims an interval of that part only when
no detector before it reserved it (`unclaimed`). Reservations use the run's configured thresholds
(`configure`, from analyze's run_detectors; the defaults otherwise), are computed once per trace and
settings (Trace.memo), and a detector never imports another to learn them. The classes register
themselves when traceinspect.detectors is imported (Detector.__init_subclass__); this module imports
no detector.
"""

from __future__ import annotations

from typing import Callable

from ..trace import intervals as iv
from ..trace.model import Trace
from . import trace_quality

# per idle part, the claimers in the order they take it; a later one never claims what an earlier one
# reserved (docs/time-lost.md). Parts with a single claimer need no entry.
ORDER: dict[str, tuple[str, ...]] = {
    "idle_launch": ("unfused-optimizer", "allocator-churn", "launch-bound", "host-bound"),
    "idle_cpu": ("allocator-churn", "cpu-offload", "host-bound"),
}

# the parts where trace quality's blind time (inside graph replays, before unlaunched kernels, queue waits
# for work not in the trace) is taken out before anyone claims: a launch or host gap there is not visible
BLIND_PARTS = ("idle_launch", "idle_cpu")

# the detector that claims the rest of each idle part (the account says why a part stayed unexplained)
PART_OWNER = {
    "idle_dataloader": "dataloader-stall",
    "idle_sync": "host-sync",
    "idle_launch": "launch-bound",
    "idle_cpu": "host-bound",
    "idle_unknown": None,
}

_CLASSES: dict[str, type] = {}  # detector name -> class, filled as the detector modules load
_PROVIDERS: dict[str, str] = {}  # fact name -> the detector whose thresholds define it
_CONFIGURED = "facts: configured detectors"


def register(cls) -> None:
    """Called by Detector.__init_subclass__: records the package's detector classes (a subclass made
    elsewhere, e.g. in a test, never replaces the one the name belongs to)."""
    name = cls.__dict__.get("name")
    if not name or not cls.__module__.startswith("traceinspect.detectors.") or name in _CLASSES:
        return
    _CLASSES[name] = cls
    for fact in cls.__dict__.get("provides", {}):
        _PROVIDERS[fact] = name


class _Settings:
    """Per trace: how this run makes a detector (its configured thresholds), and the instances made."""

    def __init__(self):
        self.make: Callable | None = None
        self.made: dict = {}


def configure(trace: Trace, make: Callable | None = None) -> None:
    """Record this run's thresholds: `make(cls)` gives the configured instance of a detector class
    (traceinspect.config.Config.make); None restores the defaults."""
    s = trace.memo(_CONFIGURED, _Settings)
    s.make, s.made = make, {}


def instance(trace: Trace, name: str):
    """The configured instance of the detector called `name` (its defaults when not configured)."""
    s = trace.memo(_CONFIGURED, _Settings)
    if name not in s.made:
        cls = _CLASSES[name]
        s.made[name] = s.make(cls) if s.make is not None else cls()
    return s.made[name]


def reserved(trace: Trace, name: str) -> iv.Set:
    """The intervals detector `name` reserves (in each part of its `reserves`), by its configured thresholds."""
    det = instance(trace, name)
    return trace.memo(("facts: reserved", det), lambda: det.reserved(trace))


def unclaimed(trace: Trace, name: str, part: str, s: iv.Set) -> iv.Set:
    """`s` (intervals of idle part `part`) less the trace-quality blind time (BLIND_PARTS) and what the
    detectors before `name` in ORDER[part] reserved, subtracted in that order."""
    if part in BLIND_PARTS:  # idle time the trace cannot attribute (trace quality) is nobody's to claim
        s = iv.subtract(s, trace_quality.blind(trace))
    order = ORDER.get(part, ())
    for other in order[: order.index(name)] if name in order else ():
        if other in _CLASSES and part in _CLASSES[other].reserves:
            s = iv.subtract(s, reserved(trace, other))
    return s


def provided(trace: Trace, fact: str):
    """A fact that a detector's configured thresholds define (e.g. "offload traffic", cpu-offload's
    classification of host<->device copies), computed once per trace and settings."""
    det = instance(trace, _PROVIDERS[fact])
    return trace.memo((fact, det), lambda: getattr(det, type(det).provides[fact])(trace))
