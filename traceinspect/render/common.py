"""Formatting shared by the text-like renderers (numbers, units, severity). No I/O."""
from __future__ import annotations

from ..report import severity


def ms(us) -> str:
    if us is None:
        return "n/a"
    us = float(us)
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f}%"


def evidence_value(e) -> str:
    v = e.value
    if isinstance(v, float):
        v = f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v} {e.unit}".strip()


def gpu_line(trace: dict) -> str:
    g = trace.get("gpu")
    if not g:
        return "no GPU activity"
    cc = f", {g['arch']}" if g.get("arch") and g.get("arch") != "unknown" else ""
    return f"{g['name']}{cc}"


def sev(f) -> str:
    return severity(f.time_lost_frac)


def labels(f) -> str:
    """Severity (share of the window lost) and confidence (strength of the evidence), each named."""
    return f"severity {sev(f)}, confidence {f.confidence}"


BREAKDOWN_ORDER = ("compute", "comm", "memcpy", "idle_dataloader", "idle_sync", "idle_launch", "idle_cpu",
                   "idle_unknown")


def run_config_items(trace: dict) -> list[tuple[str, str]]:
    """The run's recorded settings (traceinspect.capture metadata), known values only."""
    cfg = trace.get("run_config") or {}
    if not isinstance(cfg, dict):
        return []
    return [(str(k), str(v)) for k, v in cfg.items() if v is not None]
