"""Plain text for the terminal, at most 100 columns (common.fill/fit: breaks between items, never inside one).

Values from the report go through plain() (control characters and terminal escapes shown as visible
escapes, so a name cannot clear the screen, set the title or write the clipboard); the whole page then
passes through inert.document() as a last guard. Numbers go through ms()/pct()/count().
"""

from __future__ import annotations

from ..inert import document
from ..report import SpeedOfLight, known
from . import view
from .view import Chart, Evidence, Figures, KeyValue, Para, Sub, T, Table
from .common import (
    fill,
    fit,
    ms,
    num,
    pct,
    plain,
)


def render(report, *, width: int = 100, color: bool = False) -> str:
    """The report's view (render/view.py) as text lines, fitted to the width."""
    w = max(60, min(width, 100))
    head = view.header(report)
    out = [f"traceinspect report: {_spans(head.title)}"] + [fill(_spans(line), w, "") for line in head.lines]
    out.append("")
    out += blocks(view.page(report), w)
    return fit(document("\n".join(out).rstrip()), w) + "\n"


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
    return fit(document("\n".join(out)), 100) + "\n"  # the width rule of every text page


def render_whatif_job(d) -> str:
    """`traceinspect whatif DIR`'s text (a sections.WhatIfJob): the job's step before and after, per rank."""
    out = [
        f"What-if (job replay): {', '.join(plain(n) for n in d.fixes)}",
        f"  {plain(d.model)}",
        "",
        f"Job step (the slowest rank's median): measured {ms(d.measured_step_us)}, replayed "
        f"{ms(d.replayed_step_us)}, predicted {ms(d.predicted_step_us)}",
        "",
        f"{'rank':>6} {'measured':>12} {'replayed':>12} {'predicted':>12}  fixes",
    ]
    for r in d.per_rank:
        out.append(
            f"{plain(r.rank):>6} {ms(r.measured_us):>12} {ms(r.replayed_us):>12} {ms(r.predicted_us):>12}  "
            + (", ".join(plain(f) for f in r.fixes) or "-")
        )
    for n in d.notes:
        out.append(f"note: {plain(n)}")
    return fit(document("\n".join(out)), 100) + "\n"


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
    """View-model sections (render/view.py) as text lines: the title, its blocks indented 2, a blank line
    (a section without a title, the verdict: its headline at the margin). Report text is shown through
    plain(); code is plain text too (a terminal has no code font)."""
    out: list[str] = []
    for sec in sections:
        if sec.title:
            out.append(_spans(sec.title))
        out += _blocks(sec.blocks, w, "  ")
        out.append("")
    return out


def _blocks(bs, w: int, ind: str) -> list[str]:
    out: list[str] = []
    for b in bs:
        if isinstance(b, Para):
            text = _spans(b.spans)
            if b.kind in ("headline", "lead"):
                out.append(fill(f"VERDICT: {text}" if b.kind == "headline" else text, w, ""))
            elif b.kind == "strong" and ind == "  " and not out:
                out.append(fill(text, w, ""))  # the verdict's trust line, above it
            else:
                out.append(fill(f"Fix: {text}" if b.kind == "fix" else text, w, ind))
        elif isinstance(b, KeyValue):
            out += [fill(f"- {_spans(k)}: {_spans(v)}", w, ind) for k, v in b.rows]
        elif isinstance(b, Table):
            out += _table(b, w, ind)
        elif isinstance(b, Evidence):
            out += [
                fill(f"- {_spans(k)}: {_spans(v)}" + (f" [{_spans(win)}]" if _spans(win) else ""), w, ind)
                for k, v, win in b.rows
            ]
        elif isinstance(b, Figures):
            out.append(fill("; ".join(f"{_spans(k)}: {_spans(v)}" for k, v in b.items), w, ind))
        elif isinstance(b, Chart):
            out += _blocks((b.fallback,), w, ind) if b.fallback is not None else []
        elif isinstance(b, Sub):
            out.append("")
            out.append(fill(_spans(b.title), w, ""))
            out += _blocks(b.blocks, w, "   ")
        else:
            for it in b.items:
                out.append(fill(f"- {_spans(it.head)}", w, ind))
                if it.more:
                    out.append(fill(_spans(it.more), w, ind + "  "))
    return out


CELL_MAX = 48  # a text column other than the last is cut here: one long name must not widen every row
BAR_MAX = 20


def _table(b: Table, w: int, ind: str = "  ") -> list[str]:
    """Aligned columns (the table's narrow ones), numbers right-aligned, indented 2, each row within w:
    a column other than the last is cut at CELL_MAX, the last where the line ends (an ellipsis says so)."""
    cols = b.narrow or tuple(range(len(b.head)))
    grid = [[b.head[c] for c in cols]] + [[_spans(r.cells[c]) for c in cols] for r in b.rows]
    grid = [[_cut(x, CELL_MAX) for x in row[:-1]] + [row[-1]] for row in grid]
    width = [max(len(row[i]) for row in grid) for i in range(len(cols))]
    room = max(w - len(ind) - sum(width[:-1]) - 2 * (len(cols) - 1) - (BAR_MAX + 2) * b.bars, 12)
    width[-1] = min(width[-1], room)
    lines = []
    for k, row in enumerate(grid):
        row[-1] = _cut(row[-1], room)
        cells = [x.rjust(width[i]) if cols[i] in b.right else x.ljust(width[i]) for i, x in enumerate(row)]
        if b.bars and k:
            frac = min(max(num(b.rows[k - 1].bar) or 0.0, 0.0), 1.0)
            cells.append("#" * int(round(BAR_MAX * frac)))
        lines.append(ind + "  ".join(cells))
    return lines


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _spans(spans) -> str:
    return "".join(plain(p) if isinstance(p, T) else p for p in spans)
