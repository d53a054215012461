"""Formatting shared by the renderers (numbers, units, severity) and their escaping helpers. No I/O.

Every value from a report is untrusted (a saved or cached report can hold anything): interpolate it
through plain() (text), md_text()/md_code() (Markdown) or html.esc(), and numbers through ms()/pct()/
count(), which never raise and print only digits, units or "n/a".
"""

from __future__ import annotations

import math
import re
import textwrap

from ..inert import md_code, md_text, num
from ..inert import text as plain
from ..report import Memory, SpeedOfLight, known, severity

__all__ = [
    "BREAKDOWN_ORDER",
    "config_line",
    "count",
    "efficiency_peaks",
    "efficiency_rows",
    "evidence_value",
    "fill",
    "fit",
    "fix_path",
    "lost",
    "gpu_line",
    "md_code",
    "md_text",
    "ms",
    "num",
    "pct",
    "per_step",
    "plain",
    "run_config_items",
    "sev",
    "sig",
    "speed_of_light",
]


def count(x) -> str:
    """A count or rank: digits, or "n/a"."""
    v = num(x)
    if v is None:
        return "n/a"
    return str(int(v)) if math.isfinite(v) and v == int(v) else f"{v:g}"


def config_line(report) -> str:
    """'Config: pyproject.toml (ignore: TI1) - 7 detectors off', or "" when the defaults were used:
    the one line every format shows near the top, so a report that checked less, or judged with other
    thresholds, says so where a reader looks first. Unescaped: the caller escapes for its format (the
    settings of a saved report are untrusted)."""
    s = dict(report.settings or {})
    if not s:
        return ""
    source = s.pop("source", None)
    off = s.pop("detectors_off", None)
    show = lambda v: ", ".join(str(x) for x in v) if isinstance(v, list) else str(v)  # noqa: E731
    items = "; ".join(f"{k}: {show(v)}" if k in ("select", "ignore") else f"{k}={show(v)}" for k, v in s.items())
    n = len(off) if isinstance(off, list) else 0
    return (
        f"Config: {source if isinstance(source, str) and source else 'options given to the API'}"
        + (f" ({items})" if items else "")
        + (f" - {n} detector{'s' if n != 1 else ''} off" if n else "")
    )


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


# The report's resolution: a figure is worth printing when it does not round to zero in the unit it is
# printed in (ms() prints below 0.5 us as "0 us"; evidence_value() keeps 3 decimals; sig() 3 significant
# digits). Below it an item says "none" in words, and a fix-path step that leaves the printed step time
# unchanged is left out: one rule, applied here, for every format.


def lost(us) -> str:
    """A time lost: ms(us), or "none" where it rounds to zero in the unit it would be printed in."""
    v = num(us)
    return "none" if v is not None and abs(v) < 0.5 else ms(us)


def per_step(us) -> str:
    """'4.5 ms/step', or "none" below the report's resolution."""
    t = lost(us)
    return t if t == "none" else f"{t}/step"


def fix_path(verdict) -> list:
    """The verdict's fix-path steps that change the step time as printed: a step "8.2 ms -> 8.2 ms" is
    below the report's resolution and left out."""
    return [p for p in known(verdict.path, []) if ms(p.from_us) != ms(p.to_us)]


def mfu_phrase(sol) -> str:
    """'41.0% MFU', or 'no matrix FLOPs' where the modelled ops include no GEMM/conv/attention."""
    return f"{pct(sol.mfu)} MFU" if num(known(sol.mfu)) is not None else "no matrix FLOPs"


def pct(x) -> str:
    x = num(x)
    return "n/a" if x is None else f"{100 * x:.1f}%"


def evidence_value(e) -> str:
    """Value and unit, unescaped: the caller escapes (the value may be a string from a saved report)."""
    v = e.value
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 0.0005:
        return "none"  # rounds to zero at the 3 decimals shown: below the report's resolution
    if isinstance(v, float) and math.isfinite(v):
        v = f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v} {e.unit}".strip()


def gpu_line(trace) -> str:
    """GPU name and architecture (a report.TraceInfo), unescaped: the caller escapes."""
    g = trace.gpu
    if not g:
        return "no GPU activity"
    cc = f", {g.arch}" if g.arch and g.arch != "unknown" else ""
    return f"{g.name}{cc}"  # a Gpu has a name (required)


NO_LIGHT = SpeedOfLight(sol_us=None, why="no replay in this report")


def speed_of_light(verdict) -> SpeedOfLight:
    """The verdict's speed-of-light section, empty where the verdict has none."""
    w = known(verdict.whatif)
    return w.speed_of_light if w else NO_LIGHT


def replay_line(verdict) -> str:
    """'Replay model: identity error median 0.4% (max 1.2%) over the analysed steps; cross-stream, sync and
    cross-thread edges: 12 recorded, 3 inferred from timing (80.0% recorded)', unescaped; "" without a replay."""
    w = known(verdict.whatif)
    ident = w.identity if w else None
    if not ident or ident.median_error_frac is None:
        return ""
    out = (
        f"Replay model: identity error median {pct(ident.median_error_frac)} (max {pct(ident.max_error_frac)}) "
        "over the analysed steps"
    )
    e = known(ident.edges)
    if e:
        rec, inf = e.recorded, e.inferred
        if rec + inf == 0:
            out += "; no cross-stream, sync or cross-thread edge"
        else:
            out += (
                f"; cross-stream, sync and cross-thread edges: {count(rec)} recorded, {count(inf)} inferred from timing "
                f"({pct(e.recorded_share)} recorded)"
            )
    return out


def sev(f) -> str:
    return severity(num(f.time_lost_frac) or 0.0)


def rediagnosed(report) -> list:
    """The verdict's causes asked again once its replayed fixes are in (report.Rediagnosed), or []."""
    v = known(report.verdict)
    return list(known(v.rediagnosed, []) or []) if v else []


def rediagnosed_head(r) -> str:
    """'once host-bound is fixed (replayed step 9.4 ms)': the run the re-diagnosis asks in. Untrusted
    names: the caller escapes."""
    return f"once {', '.join(r.after)} is fixed (replayed step {ms(r.from_us)})"


BREAKDOWN_ORDER = (
    "compute",
    "comm",
    "memcpy",
    "idle_dataloader",
    "idle_sync",
    "idle_launch",
    "idle_cpu",
    "idle_unknown",
)


def run_config_items(trace) -> list[tuple[str, str]]:
    """The run's recorded settings (traceinspect.capture metadata), known values only, by name: the
    JSON form sorts its keys, so a report read back from it renders them in the same order."""
    cfg = known(trace.run_config) or {}
    return sorted((str(k), str(v)) for k, v in cfg.items() if v is not None)


def sig(x, digits: int = 3) -> str:
    """A number to `digits` significant digits, or "n/a": digits, sign, point and exponent only."""
    v = num(x)
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def efficiency_rows(report, top: int = 10) -> list[dict]:
    """The top rows of the report's per-shape efficiency table as display strings. Numbers are
    formatted here (digits only); names, shapes and dtypes are raw: the caller escapes them."""
    out = []
    rate = lambda x: "none" if sig(x) == "0" else sig(x)  # noqa: E731  (zero at 3 significant digits)
    for r in [r for r in known(report.efficiency.rows, []) if lost(r.gpu_us_per_step) != "none"][:top]:
        share = num(r.share_of_peak)
        out.append(
            {
                "op": str(r.op),
                "shape": str(r.shape),
                "dtype": str(r.dtype),
                "bound": str(r.bound or "n/a"),
                "calls": sig(r.calls_per_step),
                "time": ms(r.gpu_us_per_step),
                "tflops": rate(r.tflops),
                "tbps": rate(r.tbps),
                "intensity": sig(r.intensity),
                "share": "n/a" if share is None else pct(share),
                "note": str(r.note),
            }
        )
    return out


def efficiency_peaks(report) -> str:
    """'H100 SXM: 1978.9 TFLOP/s fp8, 989.4 bf16/fp16, 494.7 TF32, 67 fp32, 3.35 TB/s; source', unescaped:
    the caller escapes. Only the precisions the GPU has matrix units for are named (a V100 has fp16
    tensor cores, no bf16, TF32 or fp8 ones)."""
    p = known(report.efficiency.peaks)
    if p is None:
        return "no peak table entry for this GPU (set TRACEINSPECT_HARDWARE; docs/roofline.md)"
    rates = [
        (known(p.fp8_tflops), "fp8"),
        (p.half_tflops, "bf16/fp16" if known(p.bf16) else "fp16"),
        (p.tf32_tflops, "TF32"),
        (p.fp32_tflops, "fp32"),
    ]
    shown = [f"{sig(v, 5)} {label}" for v, label in rates if v]
    return (
        f"{p.name}: {', '.join(shown) or 'no compute peak'} TFLOP/s, {sig(p.mem_tbps, 4)} TB/s"
        + (" (approximate)" if p.approximate else "")
        + (f"; {p.source}" if known(p.source) else "")
    )


def _gb(x) -> str:
    v = num(x)
    return "unknown" if v is None else f"{v / 1e9:.2f} GB"


def memory_rows(mem: Memory) -> list[tuple[str, str]]:
    """The report's memory section as (label, value) pairs of raw text: every renderer escapes both
    (the section comes from a trace or a saved report, so device ids and reasons are untrusted)."""
    if not mem:
        return []
    rows: list[tuple[str, str]] = []
    src = {
        "trace": "[memory] events (profile_memory=True)",
        "capture": "torch.cuda.max_memory_allocated() per step (traceinspect.capture)",
    }.get(known(mem.source))
    devices = known(mem.devices, [])
    if src is None:
        rows.append(("no memory figure", str(known(mem.reason) or "unknown")))
        if known(mem.hint):
            rows.append(("to get one", str(mem.hint)))
        for d in devices:
            rows.append((f"device {d.device} capacity", _gb(d.capacity_bytes)))
        return rows
    rows.append(("source", src))
    for d in devices:
        dev = f"device {d.device}"
        cap, head = num(d.capacity_bytes), num(d.headroom_bytes)
        rows.append(
            (
                f"{dev} peak allocated / reserved",
                f"{_gb(d.peak_allocated_bytes)} / {_gb(d.peak_reserved_bytes)}" + (f" of {_gb(cap)}" if cap else ""),
            )
        )
        rows.append((f"{dev} allocated at step start (does not scale with the batch)", _gb(d.start_allocated_bytes)))
        rows.append(
            (
                f"{dev} headroom (capacity - peak reserved)",
                _gb(head) + (f" ({pct(head / cap)} of capacity)" if cap and head is not None else ""),
            )
        )
        steps = known(d.per_step, [])
        if steps:
            rows.append(
                (
                    f"{dev} peak allocated per step",
                    ", ".join(f"#{s.step} {_gb(s.peak_allocated_bytes)}" for s in steps[:16])
                    + (" ..." if len(steps) > 16 else ""),
                )
            )
    fit = known(mem.batch_fit)
    if fit:
        margin = num(fit.margin_frac)
        mf = num(fit.max_factor)
        cur, new = fit.current_batch, fit.batch
        b_name = fit.batch_name or "micro-batch"
        a_name = fit.accumulation_name or "gradient accumulation"
        grow = (
            f"{b_name} {cur} -> {new}"
            if cur is not None and new is not None
            else f"about {count(fit.factor)}x the current {b_name}"
        )
        ga, nga = fit.current_accumulation, fit.accumulation
        if ga is not None and nga is not None:
            grow += f", {a_name} {ga} -> {nga}"
        by = fit.recommended_by
        rows.append(
            (
                "largest batch growth under " + (pct(margin) if margin is not None else "the margin") + " of capacity",
                (f"{mf:.1f}x" if mf is not None else "unknown")
                + (
                    f" (linear activation model); recommended by {by}: {grow}, predicted peak "
                    f"{_gb(fit.predicted_peak_bytes)}"
                    if by
                    else " (linear activation model); no finding asks for a larger batch"
                ),
            )
        )
        for vals, label in ((fit.measured, "measured"), (fit.assumed, "assumed")):
            if vals:
                rows.append((label, "; ".join(str(v) for v in vals)))
    return rows


def trust_line(report) -> str:
    """The trace-quality line shown at the top of the verdict ("Trace quality: good", or what limits it)."""
    return known(report.trace_quality.line, "")


def quality_rows(report) -> list[tuple[str, str, str, str]]:
    """(check, status, what it measured, what the report does about it) per trace-quality check; the
    effect only where the check is not ok."""
    return [
        (
            c.check,
            c.status,
            c.summary,
            c.effect if c.status != "ok" else "",
        )
        for c in known(report.trace_quality.checks, [])
    ]


# --- width: the text formats fit their width (100 columns by default) ---------------------------------
ELLIPSIS = "..."


def fill(s: str, width: int, indent: str = "", subsequent: str | None = None) -> str:
    """s wrapped at width, broken only at spaces (between list items and words, never inside a number,
    a shape or a hyphenated name); a single token longer than the line is cut with an ellipsis (names
    from a trace can be any length), so no line ever passes width."""
    sub = indent + "  " if subsequent is None else subsequent
    room = max(width - max(len(indent), len(sub)), len(ELLIPSIS) + 1)
    s = re.sub(r"\S{%d,}" % (room + 1), lambda m: m.group()[: room - len(ELLIPSIS)] + ELLIPSIS, s)
    return textwrap.fill(
        s,
        width,
        initial_indent=indent,
        subsequent_indent=sub,
        break_long_words=False,
        break_on_hyphens=False,
        replace_whitespace=False,
    )


def fit(text: str, width: int) -> str:
    """Every line of a rendered text page at most width columns: a longer one (a table row with a long
    name or shape list) continues on the next lines, indented 4 past its own indent; no trailing spaces."""
    out = []
    for line in text.split("\n"):
        line = line.rstrip(" ")  # an empty bar column leaves no trailing spaces
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out.append(fill(line[len(lead) :], width, lead, lead + "    "))
    return "\n".join(out)
