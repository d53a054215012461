"""Plain text for the terminal, at most 100 columns (common.fill/fit: breaks between items, never inside one).

Values from the report go through plain() (control characters and terminal escapes shown as visible
escapes, so a name cannot clear the screen, set the title or write the clipboard); the whole page then
passes through inert.document() as a last guard. Numbers go through ms()/pct()/count().
"""

from __future__ import annotations

from ..inert import document
from ..findings import numbered
from ..report import Part, SpeedOfLight, known
from . import view
from .view import KeyValue, Para, T, Table
from .common import (
    BREAKDOWN_ORDER,
    config_line,
    evidence_value,
    fill,
    fit,
    fix_path,
    gpu_line,
    labels,
    replay_line,
    ms,
    num,
    pct,
    per_step,
    plain,
    trust_line,
    mfu_phrase,
    speed_of_light,
)


def render(report, *, width: int = 100, color: bool = False) -> str:
    t, st, bd, v = report.trace, report.steps, report.breakdown, report.verdict
    w = max(60, min(width, 100))
    out: list[str] = []
    wrap = lambda s, ind="": fill(s, w, ind)  # noqa: E731
    out.append(
        f"traceinspect report: {plain(known(t.file, '?'))}  (rank {plain(known(t.rank, 0))}, {plain(gpu_line(t))})"
    )
    if known(st.count):
        out.append(
            wrap(
                f"Window: {plain(known(t.window, ''))}; step time median {ms(known(st.median_us))} "
                f"(mean {ms(known(st.mean_us))}, min {ms(known(st.min_us))}, max {ms(known(st.max_us))}), "
                f"steps from {plain(known(st.source))}"
            )
        )
    if config_line(report):
        out.append(wrap(plain(config_line(report))))
    out.append("")
    if trust_line(report):
        out.append(wrap(plain(trust_line(report))))
    if known(v.top):
        out.append(wrap(f"VERDICT: {plain(known(v.headline) or known(v.top_title, ''))}"))
        if known(v.path):
            steps = "; then ".join(
                f"{plain(p.fix)}: {ms(p.from_us)} -> {ms(p.to_us)} ({plain(p.model)})" for p in fix_path(v)
            )
            if steps:
                out.append(wrap(f"Fix in rank order: {steps}.", "  "))
            out.append(
                wrap(
                    f"Measured median step {ms(v.median_step_us)}, predicted after these fixes "
                    f"{ms(v.expected_step_us)}, {light_line(v)} ({plain(known(v.assumption, ''))}).",
                    "  ",
                )
            )
            if replay_line(v):
                out.append(wrap(plain(replay_line(v)) + ".", "  "))
        else:
            out.append(
                wrap(
                    f"Fixing {', '.join(plain(n) for n in known(v.expected_from, []))} would bring the step "
                    f"to about {ms(v.expected_step_us)} instead of {ms(v.median_step_us)} "
                    f"({plain(known(v.assumption, ''))}).",
                    "  ",
                )
            )
    elif v:
        out.append(wrap(plain(known(v.headline, ""))))
    out.append("")
    out += _sections(report, w, "cross_rank")
    if bd:
        out.append("Where each step goes (mean per step)")
        busy = bd.get("gpu_busy") or Part()
        for p in BREAKDOWN_ORDER:
            b = bd.get(p)
            if not b or (not num(known(b.us)) and p not in ("compute",)):
                continue
            bar = "#" * int(round(30 * min(max(num(known(b.frac)) or 0.0, 0.0), 1.0)))
            out.append(
                f"  {plain(known(b.label, p)):<38} {ms(known(b.per_step_us)):>10} {pct(known(b.frac)):>7}  {bar}"
            )
        out.append(f"  {'GPU busy':<38} {ms(known(busy.per_step_us)):>10} {pct(known(busy.frac)):>7}")
        out.append("")
    out += _sections(report, w, "account")
    out += _sections(report, w, "quality")
    active = [(i, f) for i, f in numbered(report.findings) if not f.masked_by]
    if active:
        out.append("Findings, ranked by time lost weighted by confidence")
        for i, f in active:
            ub = " (upper bound)" if f.upper_bound else ""
            out.append(
                wrap(
                    f"{i}. {plain(f.name)} ({plain(f.code)}): {per_step(f.time_lost_per_step_us)}, "
                    f"{pct(f.time_lost_frac)} of the window{ub} [{labels(f)}]"
                )
            )
            out.append(wrap(plain(f.title), "   "))
            for e in f.evidence:
                win = f" [{plain(e.window)}]" if e.window else ""
                out.append(wrap(f"- {plain(e.label)}: {plain(evidence_value(e))}{win}", "   "))
            out.append(wrap(f"Fix: {plain(f.fix)}", "   "))
            for ev in f.events[:3]:
                out.append(
                    wrap(
                        f"e.g. {plain(str(ev.name)[:80])} at {ms(ev.ts_us)} for {ms(ev.dur_us)} on {plain(ev.track)}",
                        "   ",
                    )
                )
            out.append("")
    else:
        out.append("No findings.")
        out.append("")
    out += _sections(report, w, "next_bottlenecks", "top_kernels", "efficiency", "memory", "run_config", "ranks")
    out += _sections(report, w, "failures", "warnings", "skipped")
    return fit(document("\n".join(out).rstrip()), w) + "\n"


def light_line(v) -> str:
    """'speed of light 3.1 ms (41.0% MFU)', or why it is unknown, from a Verdict's what-if section."""
    sol = speed_of_light(v)
    return (
        f"speed of light {ms(sol.sol_us)} ({mfu_phrase(sol)})"
        if known(sol.sol_us)
        else f"speed of light unknown: {plain(known(sol.why, 'no model'))}"
    )


def render_whatif(d) -> str:
    """`traceinspect whatif`'s text (a report.WhatIfRun): predicted steps, the critical path's composition,
    the floor."""
    out = [f"What-if (replay): {', '.join(plain(n) for n in known(d.fixes, []))}"]
    for name, model in known(d.models, {}).items():
        out.append(f"  {plain(name)}: {plain(model)}")
    for n in known(d.not_found, []):
        out.append(f"  note: {plain(n)} did not fire on this trace; its transformation changes only what it finds")
    ident = known(d.identity)
    if ident:
        out.append(f"Identity replay error: median {pct(ident.median_error_frac)}, max {pct(ident.max_error_frac)}")
    out.append("")
    out.append(f"{'step':>8} {'measured':>12} {'predicted':>12} {'GPU work':>12} {'GPU floor':>12}")
    for r in known(d.steps, []):
        out.append(
            f"{plain(r.step):>8} {ms(r.measured_us):>12} {ms(r.predicted_us):>12} {ms(known(r.gpu_work_us)):>12}"
            f" {ms(known(r.gpu_floor_us)):>12}"
        )
    out.append(f"{'median':>8} {ms(d.measured_median_us):>12} {ms(d.predicted_median_us):>12}")
    out.append("")
    out.append(_light(known(d.speed_of_light) or SpeedOfLight()))
    path = known(d.critical_path_us, {})
    tot = sum(path.values()) or 1.0
    out.append("Critical path of the predicted run (share of the analysed window):")
    for k, v in path.items():
        out.append(f"  {plain(k):<20} {ms(v):>12} {pct(v / tot):>7}")
    for n in known(d.notes, []):
        out.append(f"note: {plain(n)}")
    return "\n".join(out) + "\n"


def _light(sol: SpeedOfLight) -> str:
    if not known(sol.sol_us):
        return f"Speed of light: unknown ({plain(known(sol.why, 'no model'))})"
    parts = ""
    if known(sol.roofline_us) is not None and known(sol.unmodelled_us) is not None:
        parts = f" (modelled ops at their roofline {ms(sol.roofline_us)}"
        if num(sol.unmodelled_us):
            parts += f", unmodelled kernels at their measured {ms(sol.unmodelled_us)}"
        if num(known(sol.overlap)) is not None and num(sol.overlap) < 0.995:
            parts += f", x{plain(round(num(sol.overlap), 2))} for the streams' overlap"
        parts += ")"
    matrix = (
        f"; achieved {plain(round(num(sol.achieved_tflops) or 0, 1))} TFLOP/s of GEMM/conv/attention,"
        f" MFU {pct(sol.mfu)}"
        if num(known(sol.mfu)) is not None
        else "; no matrix FLOPs (MFU n/a)"
    )
    return f"Speed of light: {ms(sol.sol_us)} per step{parts}{matrix}"


def blocks(sections, w: int) -> list[str]:
    """View-model sections (render/view.py) as text lines: the title, its blocks indented 2, a blank line.
    Report text is shown through plain(); code is plain text too (a terminal has no code font)."""
    out: list[str] = []
    for sec in sections:
        out.append(_spans(sec.title))
        for b in sec.blocks:
            if isinstance(b, Para):
                out.append(fill(_spans(b.spans), w, "  "))
            elif isinstance(b, KeyValue):
                out += [fill(f"- {_spans(k)}: {_spans(v)}", w, "  ") for k, v in b.rows]
            elif isinstance(b, Table):
                out += _table(b, w)
            else:
                for it in b.items:
                    out.append(fill(f"- {_spans(it.head)}", w, "  "))
                    if it.more:
                        out.append(fill(_spans(it.more), w, "    "))
        out.append("")
    return out


CELL_MAX = 48  # a text column other than the last is cut here: one long name must not widen every row
BAR_MAX = 20


def _table(b: Table, w: int) -> list[str]:
    """Aligned columns (the table's narrow ones), numbers right-aligned, indented 2, each row within w:
    a column other than the last is cut at CELL_MAX, the last where the line ends (an ellipsis says so)."""
    cols = b.narrow or tuple(range(len(b.head)))
    grid = [[b.head[c] for c in cols]] + [[_spans(r.cells[c]) for c in cols] for r in b.rows]
    grid = [[_cut(x, CELL_MAX) for x in row[:-1]] + [row[-1]] for row in grid]
    width = [max(len(row[i]) for row in grid) for i in range(len(cols))]
    room = max(w - 2 - sum(width[:-1]) - 2 * (len(cols) - 1) - (BAR_MAX + 2) * b.bars, 12)
    width[-1] = min(width[-1], room)
    lines = []
    for k, row in enumerate(grid):
        row[-1] = _cut(row[-1], room)
        cells = [x.rjust(width[i]) if cols[i] in b.right else x.ljust(width[i]) for i, x in enumerate(row)]
        if b.bars and k:
            frac = min(max(num(b.rows[k - 1].bar) or 0.0, 0.0), 1.0)
            cells.append("#" * int(round(BAR_MAX * frac)))
        lines.append("  " + "  ".join(cells))
    return lines


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _spans(spans) -> str:
    return "".join(plain(p) if isinstance(p, T) else p for p in spans)


def _sections(report, w: int, *names: str) -> list[str]:
    return blocks(view.sections(report, names), w)
