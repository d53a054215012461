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
from .view import KeyValue, Para, T
from .common import (
    BREAKDOWN_ORDER,
    config_line,
    efficiency_peaks,
    efficiency_rows,
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
    run_config_items,
    trust_line,
    count,
    mfu_phrase,
    rediagnosed,
    rediagnosed_head,
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
    out += cross_rank_lines(report, wrap)
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
    out += account_lines(report, wrap)
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
    out += next_bottleneck_lines(report, wrap)
    out += efficiency_lines(report)
    out += _sections(report, w, "memory")
    items = run_config_items(t)
    if items:
        out.append("Run configuration (recorded by traceinspect.capture)")
        out.append(wrap(", ".join(f"{plain(k)}={plain(val)}" for k, val in items), "  "))
        out.append("")
    if report.ranks and len(report.ranks) > 1:
        out.append("Ranks")
        for r in report.ranks:
            mark = ("  <- gates the step" if known(r.gating) else "") + ("  <- slowest" if known(r.slowest) else "")
            out.append(
                f"  rank {plain(known(r.rank)):>3}  median step {ms(known(r.median_step_us)):>10}  "
                f"busy {pct(known(r.gpu_busy_frac)):>7}  top: {plain(known(r.top_finding) or '-')}{mark}"
            )
        out.append("")
    out += _sections(report, w, "failures", "warnings", "skipped")
    return fit(document("\n".join(out).rstrip()), w) + "\n"


def cross_rank_lines(report, wrap) -> list[str]:
    """Collectives aligned across ranks: who arrives last, and each rank's wait vs own transfer."""
    c = report.cross_rank
    if not c:
        return []
    out = [
        f"Collectives across {len(known(c.ranks, []))} ranks ({count(c.matched)} matched per rank; "
        f"largest arrival skew {ms(c.max_arrival_skew_us)}; clock: {plain(known(c.clock, ''))})"
    ]
    for p in known(c.per_rank, []):
        mark = "  <- gates the step" if p.rank == known(c.gating_rank) else ""
        out.append(
            f"  rank {plain(p.rank):>3}  last at {count(p.last_arrivals):>3}  "
            f"waits {ms(p.wait_us_per_step):>9}/step  transfer {ms(p.transfer_us_per_step):>9}/step  "
            f"job cost {ms(p.job_cost_us_per_step):>9}/step{mark}"
        )
    for n in known(c.notes, [])[:5]:
        out.append(wrap(f"- {plain(n)}", "  "))
    out.append("")
    return out


def light_line(v) -> str:
    """'speed of light 3.1 ms (41.0% MFU)', or why it is unknown, from a Verdict's what-if section."""
    sol = speed_of_light(v)
    return (
        f"speed of light {ms(sol.sol_us)} ({mfu_phrase(sol)})"
        if known(sol.sol_us)
        else f"speed of light unknown: {plain(known(sol.why, 'no model'))}"
    )


def efficiency_lines(report, top: int = 8) -> list[str]:
    """The top rows of the per-shape efficiency table, one line each."""
    rows = efficiency_rows(report, top)
    if not rows:
        return []
    out = [
        "Efficiency against the roofline, by op and shape (top by GPU time)",
        f"  peaks: {plain(efficiency_peaks(report))}",
    ]
    for r in rows:
        out.append(
            f"  {r['time']:>9}/step  {r['share']:>7} of roofline  {_unit(r['tflops'], 'TFLOP/s', 'FLOPs')}"
            f"  {_unit(r['tbps'], 'TB/s', 'bytes')}"
            f"  {plain(r['bound']):<7}  {plain(r['op'])} {plain(r['shape'])} {plain(r['dtype'])}"
        )
    out.append("")
    return out


def account_lines(report, wrap) -> list[str]:
    """The explained-time account: GPU idle time per finding plus what stayed unexplained, and why."""
    a = report.account
    if not num(a.idle_us):
        return []
    out = [
        f"Where the GPU idle time goes (explained: {pct(a.explained_frac_of_idle)} of GPU idle time; "
        f"idle {ms(a.idle_per_step_us)} per step)"
    ]
    for p in known(a.parts, []):
        out.append(f"  {plain(p.name):<38} {ms(p.per_step_us):>10} {pct(p.frac_of_step):>7} of the step")
    out.append(
        f"  {'unexplained':<38} {ms(a.unexplained_per_step_us):>10} {pct(a.unexplained_frac_of_step):>7} of the step"
    )
    for r in known(a.unexplained_reasons, []):
        out.append(wrap(f"- unexplained {plain(r.part)} ({ms(r.per_step_us)}/step): {plain(r.why)}", "  "))
    for r in known(a.artifacts, []):
        out.append(wrap(f"- not unexplained, {plain(r.label)}: {ms(r.per_step_us)}/step ({pct(r.frac_of_step)})", "  "))
    out.append("")
    return out


def next_bottleneck_lines(report, wrap) -> list[str]:
    """Masked causes: present now but hidden behind the active ones; what they cost now and later."""
    latent = [(i, f) for i, f in numbered(report.findings) if f.masked_by]
    again = rediagnosed(report)
    if not latent and not again:
        return []
    c = num(known(report.steps.count))
    n = int(c) if c is not None and 1 <= c < 1e12 else 1
    out = ["Next bottlenecks (present, masked now by the causes above)"]
    for r in again:
        out.append(
            wrap(
                f"- {plain(r.fix)} ({plain(r.present)} now): {plain(rediagnosed_head(r))} its fix would save "
                f"{per_step(r.saved_per_step_us)} ({pct(r.share_of_predicted)} of that step) [replay]"
            )
        )
        if known(r.reason):
            out.append(wrap(f"now: {plain(r.reason)}", "   "))
    if again:
        out.append("")
    for i, f in latent:
        proj = (num(f.projected_lost_us) or 0.0) / n
        out.append(
            wrap(
                f"{i}. {plain(f.name)} ({plain(f.code)}): {per_step(f.time_lost_per_step_us)} now, about "
                f"{per_step(proj)} once {', '.join(plain(m) for m in f.masked_by)} is fixed [{labels(f)}]"
            )
        )
        out.append(wrap(plain(f.title), "   "))
        out.append(wrap(f"Fix: {plain(f.fix)}", "   "))
        out.append("")
    return out


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


def _unit(value: str, unit: str, none: str) -> str:
    """'  50.8 TFLOP/s', or '  no FLOPs' in the same width where the rate is below the report's resolution."""
    w = 7 + len(unit)
    return f"{'no ' + none:>{w}}" if value == "none" else f"{value:>6} {unit}"


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
            else:
                for it in b.items:
                    out.append(fill(f"- {_spans(it.head)}", w, "  "))
                    if it.more:
                        out.append(fill(_spans(it.more), w, "    "))
        out.append("")
    return out


def _spans(spans) -> str:
    return "".join(plain(p) if isinstance(p, T) else p for p in spans)


def _sections(report, w: int, *names: str) -> list[str]:
    return blocks(view.sections(report, names), w)
