"""Charts as SVG text (matplotlib, imported lazily, object API only: no pyplot, no global state).

Every function returns an SVG string or None when matplotlib is not installed or there is nothing to
draw. No file I/O here (markdown.render_with_assets writes the files). Output is deterministic.
"""

from __future__ import annotations

import importlib.util
import io
import re

from .common import BREAKDOWN_ORDER, num, plain
from ..report import known

INSTALL_HINT = "pip install -e '.[html]' in the traceinspect checkout"

# one colour per part, shared by every chart and the HTML legend swatches (colour-blind-safe-ish:
# busy parts are cool colours, idle causes warm ones, unattributed grey)
COLORS = {
    "compute": "#4c72b0",
    "comm": "#8172b3",
    "memcpy": "#64b5cd",
    "idle_dataloader": "#dd8452",
    "idle_sync": "#c44e52",
    "idle_launch": "#ccb974",
    "idle_cpu": "#937860",
    "idle_unknown": "#b8b8b8",
}
SHORT = {
    "compute": "compute",
    "comm": "communication",
    "memcpy": "memcpy/memset",
    "idle_dataloader": "idle: DataLoader",
    "idle_sync": "idle: sync",
    "idle_launch": "idle: launch",
    "idle_cpu": "idle: CPU work",
    "idle_unknown": "idle: unattributed",
}
BUSY = ("compute", "comm", "memcpy")
MAX_BARS = 120  # more steps than this are drawn as stacked areas
# A chart draws numbers no larger than this (ms; about 30,000 years): a saved report can hold any JSON
# number, and a stack of 1e308s overflows to inf inside matplotlib's transforms. A report with such a
# value gets no chart; its tables below still print every number.
MAX_MS = 1e12


def _drawable(values) -> bool:
    """Every value a finite number within +-MAX_MS (so sums of a few thousand stay finite)."""
    return all(isinstance(v, (int, float)) and abs(v) <= MAX_MS for v in values)


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def step_breakdown(report) -> str | None:
    """Stacked bars: each analysed step's time split into the breakdown parts (ms)."""
    rows = [r for r in known(report.steps.per_step, []) if known(r.breakdown_us)]
    if not rows or not available():
        return None
    fig, ax = _figure(8.6, 3.4)
    x = list(range(len(rows)))
    series = [(p, [float(known(r.breakdown_us).get(p, 0.0)) / 1e3 for r in rows]) for p in BREAKDOWN_ORDER]
    series = [(p, vals) for p, vals in series if any(vals)]
    if not _drawable(v for _, vals in series for v in vals):
        return None
    if len(rows) > MAX_BARS:
        # one polygon per part instead of one rectangle per step and part keeps the SVG small
        ax.stackplot(
            x,
            *[vals for _, vals in series],
            colors=[COLORS[p] for p, _ in series],
            labels=[SHORT[p] for p, _ in series],
            linewidth=0,
        )
    else:
        bottom = [0.0] * len(rows)
        for p, vals in series:
            ax.bar(
                x,
                vals,
                bottom=bottom,
                color=COLORS[p],
                label=SHORT[p],
                width=0.8 if len(rows) > 1 else 0.4,
                linewidth=0,
            )
            bottom = [b + v for b, v in zip(bottom, vals)]
    step_every = max(1, len(rows) // 20)
    ax.set_xticks(x[::step_every])
    ax.set_xticklabels([_label(f"#{rows[i].step}") for i in x[::step_every]])
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step")
    _legend(ax)
    return _svg(fig, "breakdown")


def step_timeline(report) -> str | None:
    """One representative step as two lanes: GPU busy by kind of work, GPU idle by cause (ms)."""
    ts = report.timeline_sample
    iv = known(ts.intervals) or {}
    if not iv or not available():
        return None
    dur = num(ts.dur_us) or 0.0
    if not _drawable([dur / 1e3] + [x / 1e3 for spans in iv.values() for sp in spans for x in sp]):
        return None
    fig, ax = _figure(8.6, 2.6)
    lanes = {"GPU busy": 1, "GPU idle": 0}
    for p in BREAKDOWN_ORDER:
        spans = iv.get(p)
        if not spans:
            continue
        y = lanes["GPU busy"] if p in BUSY else lanes["GPU idle"]
        # true widths: the sample already packs each column's share of every part (timeline_sample._columns);
        # a minimum width would paint a few us of idle between back-to-back kernels as a solid block
        ax.broken_barh(
            [(a / 1e3, (b - a) / 1e3) for a, b in spans],
            (y - 0.38, 0.76),
            facecolors=COLORS[p],
            label=SHORT[p],
            linewidth=0,
        )
    ax.set_yticks(list(lanes.values()))
    ax.set_yticklabels(list(lanes))
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlim(0, dur / 1e3 or 1)
    ax.set_xlabel("ms from the start of the step")
    ax.set_title(
        _label(f"ProfilerStep#{known(ts.step)} ({known(ts.choice, 'representative step')}, {dur / 1e3:.1f} ms)")
    )
    _legend(ax)
    return _svg(fig, "timeline")


def diff_breakdown(d) -> str | None:
    """Left: mean step before/after split into parts. Right: every step's duration before and after."""
    if not available() or not (d.breakdown or d.before.steps.n or d.after.steps.n):
        return None
    parts = {r.part: r for r in d.breakdown}
    numbers = [x / 1e3 for r in parts.values() for x in (r.before_us, r.after_us)]
    for side in (d.before, d.after):
        numbers += [v / 1e3 for v in side.steps.durations_us] + [side.steps.median_us / 1e3]
    if not _drawable(numbers):
        return None
    fig, (ax, ax2) = _figure(8.6, 3.2, ncols=2, width_ratios=(1.4, 1))
    left = [0.0, 0.0]
    for p in BREAKDOWN_ORDER:
        r = parts.get(p)
        if not r or not (r.before_us or r.after_us):
            continue
        vals = [r.before_us / 1e3, r.after_us / 1e3]
        ax.barh([1, 0], vals, left=left, color=COLORS[p], label=SHORT[p], height=0.6, linewidth=0)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks([1, 0])
    ax.set_yticklabels(["before", "after"])
    ax.set_xlabel("ms per step (mean)")
    ax.set_title("Breakdown per step")
    _legend(ax)
    for y, side in ((1, d.before), (0, d.after)):
        durs = [v / 1e3 for v in side.steps.durations_us]
        if durs:
            ax2.scatter(durs, [y] * len(durs), s=14, color="#555555", alpha=0.7, linewidths=0)
        med = side.steps.median_us / 1e3
        ax2.plot([med, med], [y - 0.3, y + 0.3], color="#c44e52", linewidth=2)
    ax2.set_yticks([1, 0])
    ax2.set_yticklabels(["before", "after"])
    ax2.set_ylim(-0.6, 1.6)
    ax2.set_xlabel("step time, ms (red: median)")
    ax2.set_title("Every step")
    return _svg(fig, "diff")


# --- matplotlib plumbing ---------------------------------------------------------------------------

_RC = {
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.family": "sans-serif",
}


def _figure(w: float, h: float, ncols: int = 1, width_ratios=None):
    import matplotlib
    from matplotlib.figure import Figure

    # rc settings are read when artists are made, so the style applies here rather than globally
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(w, h), layout="constrained")
        kw = {"width_ratios": width_ratios} if width_ratios else {}
        axes = fig.subplots(1, ncols, gridspec_kw=kw) if ncols > 1 else fig.subplots()
    return fig, axes


def _label(s) -> str:
    """Report text as a matplotlib label: control characters escaped, `$` literal (no mathtext parse,
    which raises on malformed input). matplotlib escapes the SVG text itself."""
    return plain(s).replace("$", "\\$")


def _legend(ax) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)


def _svg(fig, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    # a fixed per-chart salt keeps ids stable (deterministic output) and distinct between inline charts
    with matplotlib.rc_context({**_RC, "svg.hashsalt": f"traceinspect-{salt}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE for inline use
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    return svg.strip()
