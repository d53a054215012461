"""Formatting shared by the renderers (numbers, units, severity) and their escaping helpers. No I/O.

Every value from a report is untrusted (a saved or cached report can hold anything): interpolate it
through plain() (text), md_text()/md_code() (Markdown) or html.esc(), and numbers through ms()/pct()/
count(), which never raise and print only digits, units or "n/a".
"""
from __future__ import annotations

import math

from ..inert import md_code, md_text, num
from ..inert import text as plain
from ..report import UNSET, Gpu, known, severity

__all__ = ["BREAKDOWN_ORDER", "count", "efficiency_peaks", "efficiency_rows", "evidence_value", "gpu_line", "md_code",
           "md_text", "ms", "num", "pct", "plain", "run_config_items", "sev", "sig"]


def count(x) -> str:
    """A count or rank: digits, or "n/a"."""
    v = num(x)
    if v is None:
        return "n/a"
    return str(int(v)) if math.isfinite(v) and v == int(v) else f"{v:g}"


def ms(us) -> str:
    us = num(us)
    if us is None:
        return "n/a"
    if math.isinf(us):
        return f"{us} us"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def pct(x) -> str:
    x = num(x)
    return "n/a" if x is None else f"{100 * x:.1f}%"


def evidence_value(e) -> str:
    """Value and unit, unescaped: the caller escapes (the value may be a string from a saved report)."""
    v = e.value
    if isinstance(v, float) and math.isfinite(v):
        v = f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v} {e.unit}".strip()


def gpu_line(trace) -> str:
    """GPU name and architecture (a report.TraceInfo), unescaped: the caller escapes."""
    g = trace.gpu
    if not g:
        return "no GPU activity"
    if not isinstance(g, Gpu):
        return str(g)
    cc = f", {g.arch}" if g.arch and g.arch != "unknown" else ""
    return f"{'?' if g.name is UNSET else g.name}{cc}"


def sev(f) -> str:
    return severity(num(f.time_lost_frac) or 0.0)


def labels(f) -> str:
    """Severity (share of the window lost) and confidence (strength of the evidence), each named."""
    return f"severity {sev(f)}, confidence {plain(f.confidence)}"


BREAKDOWN_ORDER = ("compute", "comm", "memcpy", "idle_dataloader", "idle_sync", "idle_launch", "idle_cpu",
                   "idle_unknown")


def run_config_items(trace: dict) -> list[tuple[str, str]]:
    """The run's recorded settings (traceinspect.capture metadata), known values only."""
    cfg = known(trace.run_config) or {}
    if not isinstance(cfg, dict):
        return []
    return [(str(k), str(v)) for k, v in cfg.items() if v is not None]


def sig(x, digits: int = 3) -> str:
    """A number to `digits` significant digits, or "n/a": digits, sign, point and exponent only."""
    v = num(x)
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def efficiency_rows(report, top: int = 10) -> list[dict]:
    """The top rows of the report's per-shape efficiency table as display strings. Numbers are
    formatted here (digits only); names, shapes and dtypes are raw: the caller escapes them."""
    eff = getattr(report, "efficiency", None)
    rows = eff.get("rows") if isinstance(eff, dict) else None
    if not isinstance(rows, list):
        return []
    out = []
    for r in rows[:top]:
        if not isinstance(r, dict):
            continue
        share = num(r.get("share_of_peak"))
        out.append({"op": str(r.get("op", "?")), "shape": str(r.get("shape", "")), "dtype": str(r.get("dtype", "")),
                    "bound": str(r.get("bound") or "n/a"), "calls": sig(r.get("calls_per_step")),
                    "time": ms(r.get("gpu_us_per_step")), "tflops": sig(r.get("tflops")), "tbps": sig(r.get("tbps")),
                    "intensity": sig(r.get("intensity")), "share": "n/a" if share is None else pct(share),
                    "note": str(r.get("note") or "")})
    return out


def efficiency_peaks(report) -> str:
    """'H100 SXM: 989.4 TFLOP/s bf16/fp16, 3.35 TB/s (source)', unescaped: the caller escapes."""
    eff = getattr(report, "efficiency", None)
    p = eff.get("peaks") if isinstance(eff, dict) else None
    if not isinstance(p, dict):
        return "no peak table entry for this GPU (set TRACEINSPECT_HARDWARE; docs/roofline.md)"
    return (f"{p.get('name', '?')}: {sig(p.get('half_tflops'), 5)} TFLOP/s bf16/fp16, {sig(p.get('tf32_tflops'), 5)} "
            f"TF32, {sig(p.get('fp32_tflops'), 5)} fp32, {sig(p.get('mem_tbps'), 4)} TB/s"
            + (" (approximate)" if p.get("approximate") else "") + (f"; {p.get('source')}" if p.get("source") else ""))


def _gb(x) -> str:
    v = num(x)
    return "unknown" if v is None else f"{v / 1e9:.2f} GB"


def memory_rows(mem: dict) -> list[tuple[str, str]]:
    """The report's memory section as (label, value) pairs of raw text: every renderer escapes both
    (the section comes from a trace or a saved report, so device ids and reasons are untrusted)."""
    if not isinstance(mem, dict) or not mem:
        return []
    rows: list[tuple[str, str]] = []
    src = {"trace": "[memory] events (profile_memory=True)",
           "capture": "torch.cuda.max_memory_allocated() per step (traceinspect.capture)"}.get(mem.get("source"))
    devices = mem.get("devices") if isinstance(mem.get("devices"), list) else []
    devices = [d for d in devices if isinstance(d, dict)]
    if src is None:
        rows.append(("no memory figure", str(mem.get("reason") or "unknown")))
        if mem.get("hint"):
            rows.append(("to get one", str(mem.get("hint"))))
        for d in devices:
            rows.append((f"device {d.get('device')} capacity", _gb(d.get("capacity_bytes"))))
        return rows
    rows.append(("source", src))
    for d in devices:
        dev = f"device {d.get('device')}"
        cap, head = num(d.get("capacity_bytes")), num(d.get("headroom_bytes"))
        rows.append((f"{dev} peak allocated / reserved",
                     f"{_gb(d.get('peak_allocated_bytes'))} / {_gb(d.get('peak_reserved_bytes'))}"
                     + (f" of {_gb(cap)}" if cap else "")))
        rows.append((f"{dev} allocated at step start (does not scale with the batch)",
                     _gb(d.get("start_allocated_bytes"))))
        rows.append((f"{dev} headroom (capacity - peak reserved)",
                     _gb(head) + (f" ({pct(head / cap)} of capacity)" if cap and head is not None else "")))
        steps = d.get("per_step") if isinstance(d.get("per_step"), list) else []
        steps = [s for s in steps if isinstance(s, dict)]
        if steps:
            rows.append((f"{dev} peak allocated per step",
                         ", ".join(f"#{s.get('step')} {_gb(s.get('peak_allocated_bytes'))}" for s in steps[:16])
                         + (" ..." if len(steps) > 16 else "")))
    fit = mem.get("batch_fit")
    if isinstance(fit, dict):
        margin = num(fit.get("margin_frac"))
        mf = num(fit.get("max_factor"))
        cur, new = fit.get("current_batch"), fit.get("batch")
        b_name = fit.get("batch_name") or "micro-batch"
        a_name = fit.get("accumulation_name") or "gradient accumulation"
        grow = (f"{b_name} {cur} -> {new}" if cur is not None and new is not None
                else f"about {count(fit.get('factor'))}x the current {b_name}")
        ga, nga = fit.get("current_accumulation"), fit.get("accumulation")
        if ga is not None and nga is not None:
            grow += f", {a_name} {ga} -> {nga}"
        rows.append(("largest batch growth under " + (pct(margin) if margin is not None else "the margin")
                     + " of capacity", (f"{mf:.1f}x" if mf is not None else "unknown")
                     + f"; recommended (up to 8x): {grow}, predicted peak {_gb(fit.get('predicted_peak_bytes'))}"))
        for key, label in (("measured", "measured"), ("assumed", "assumed")):
            vals = fit.get(key)
            if isinstance(vals, list) and vals:
                rows.append((label, "; ".join(str(v) for v in vals)))
    return rows
