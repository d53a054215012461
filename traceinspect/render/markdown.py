"""Markdown for tickets and CI step summaries: names in code spans, every value escaped, bounded size."""

from __future__ import annotations

from ..findings import numbered
from ..report import Part, known
from . import view
from .view import C, KeyValue, Para, T
from .common import (
    config_line,
    BREAKDOWN_ORDER,
    count,
    fix_path,
    lost,
    efficiency_peaks,
    efficiency_rows,
    evidence_value,
    gpu_line,
    md_code,
    md_text,
    replay_line,
    ms,
    num,
    pct,
    run_config_items,
    trust_line,
    sev,
    mfu_phrase,
    per_step,
    rediagnosed,
    rediagnosed_head,
    speed_of_light,
)

MAX_BYTES = 1 << 20  # GitHub step summaries reject more than 1 MiB

# Every value below reaches the page through md_text() (lines, cells), md_code() (names in backticks)
# or ms()/pct()/count() (numbers): tests/test_injection.py renders a report whose every string is
# hostile through cmark-gfm, and checks that each interpolation here is one of those calls.


def render(report, *, width: int = 100, color: bool = False) -> str:
    t, st, bd, v = report.trace, report.steps, report.breakdown, report.verdict
    o: list[str] = []
    o.append(f"## traceinspect: {md_text(known(t.file, '?'))}")
    o.append("")
    o.append(f"- GPU: {md_text(gpu_line(t))}; rank {md_text(known(t.rank, 0))}")
    if known(st.count):
        o.append(
            f"- Window: {md_text(known(t.window, ''))}; step time median **{ms(known(st.median_us))}** "
            f"(mean {ms(known(st.mean_us))}, min {ms(known(st.min_us))}, max {ms(known(st.max_us))})"
        )
    if config_line(report):
        o.append(f"- **{md_text(config_line(report))}**")
    o.append("")
    if trust_line(report):
        o.append(f"**{md_text(trust_line(report))}**")
        o.append("")
    if known(v.top):
        o.append(f"**Verdict:** {md_text(known(v.headline) or known(v.top_title, ''))}")
        o.append("")
        if known(v.path):
            sol = speed_of_light(v)
            o.append(
                (
                    "Fix in rank order: "
                    + "; then ".join(
                        f"{md_code(p.fix)}: {ms(p.from_us)} -> {ms(p.to_us)} ({md_text(p.model)})" for p in fix_path(v)
                    )
                    + ". "
                    if fix_path(v)
                    else ""
                )
                + f"Measured median step {ms(v.median_step_us)}, predicted after these fixes "
                f"**{ms(v.expected_step_us)}**, "
                + (
                    f"speed of light {ms(sol.sol_us)} ({md_text(mfu_phrase(sol))})"
                    if known(sol.sol_us)
                    else f"speed of light unknown: {md_text(known(sol.why, 'no model'))}"
                )
                + f" ({md_text(known(v.assumption, ''))})."
            )
            if replay_line(v):
                o.append("")
                o.append(md_text(replay_line(v)) + ".")
        else:
            o.append(
                f"Fixing {', '.join(md_code(n) for n in known(v.expected_from, []))} would bring the "
                f"step to about **{ms(v.expected_step_us)}** instead of {ms(v.median_step_us)} "
                f"({md_text(known(v.assumption, ''))})."
            )
    elif v:
        o.append(f"**Verdict:** {md_text(known(v.headline, ''))}")
    o.append("")
    o += cross_rank_md(report)
    if bd:
        o.append("| where each step goes | per step | share |")
        o.append("|---|---:|---:|")
        for p in BREAKDOWN_ORDER:
            b = bd.get(p)
            if b and ((num(known(b.us)) or 0) > 0 or p == "compute"):
                o.append(f"| {md_text(known(b.label, p))} | {ms(known(b.per_step_us))} | {pct(known(b.frac))} |")
        b = bd.get("gpu_busy") or Part()
        o.append(f"| **GPU busy** | {ms(known(b.per_step_us))} | {pct(known(b.frac))} |")
        o.append("")
    o += account_md(report)
    o += _sections(report, "quality")
    active = [(i, f) for i, f in numbered(report.findings) if not f.masked_by]
    if active:
        o.append("### Findings, ranked by time lost weighted by confidence")
        o.append("")
        o.append("| # | finding | lost per step | share | severity | confidence |")
        o.append("|---:|---|---:|---:|---|---|")
        for i, f in active:
            o.append(
                f"| {count(i)} | {md_code(f.name, in_table=True)} {md_text(f.title)} | "
                f"{lost(f.time_lost_per_step_us)} | {pct(f.time_lost_frac)} | "
                f"{md_text(sev(f))} | {md_text(f.confidence)} |"
            )
        o.append("")
        for i, f in active:
            o.append(f"#### {count(i)}. {md_code(f.name)} ({md_text(f.code)})")
            o.append("")
            o.append(md_text(f.title))
            o.append("")
            for e in f.evidence:
                o.append(
                    f"- {md_text(e.label)}: **{md_text(evidence_value(e))}**"
                    + (f" _({md_text(e.window)})_" if e.window else "")
                )
            o.append(f"- Fix: {md_text(f.fix)}")
            for ev in f.events[:3]:
                o.append(f"- e.g. {md_code(ev.name, 90)} at {ms(ev.ts_us)}, {ms(ev.dur_us)} on {md_text(ev.track)}")
            o.append("")
    else:
        o.append("No findings.")
        o.append("")
    o += next_bottlenecks_md(report)
    if report.top_kernels:
        o.append("<details><summary>Top kernels</summary>")
        o.append("")
        o.append("| kernel | calls | total | share |")
        o.append("|---|---:|---:|---:|")
        for k in report.top_kernels:
            o.append(
                f"| {md_code(k.name, 90, in_table=True)} | {count(k.count)} | "
                f"{ms(k.total_us)} | {pct(k.frac_of_kernel_time)} |"
            )
        o.append("")
        o.append("</details>")
        o.append("")
    o += efficiency_lines(report)
    o += _sections(report, "memory")
    items = run_config_items(t)
    if items:
        o.append("<details><summary>Run configuration (recorded by traceinspect.capture)</summary>")
        o.append("")
        o.append("| setting | value |")
        o.append("|---|---|")
        for k, val in items:
            o.append(f"| {md_code(k, in_table=True)} | {md_text(val)} |")
        o.append("")
        o.append("</details>")
        o.append("")
    if report.ranks and len(report.ranks) > 1:
        o.append("| rank | median step | GPU busy | top finding |")
        o.append("|---:|---:|---:|---|")
        for r in report.ranks:
            o.append(
                f"| {md_text(known(r.rank))}{' **(gates the step)**' if known(r.gating) else ''}"
                f"{' **(slowest)**' if known(r.slowest) else ''} | "
                f"{ms(known(r.median_step_us))} | {pct(known(r.gpu_busy_frac))} | "
                f"{md_text(known(r.top_finding) or '-')} |"
            )
        o.append("")
    o += _sections(report, "failures", "warnings", "skipped")
    text = "\n".join(o).rstrip() + "\n"
    if len(text.encode()) > MAX_BYTES:
        cut = text.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore")
        text = cut.rsplit("\n", 1)[0] + "\n\n_(report truncated to stay under 1 MiB)_\n"
    return text


def efficiency_lines(report, top: int = 10) -> list[str]:
    """The top rows of the per-shape efficiency table (GPU time per step, achieved rates, roofline share)."""
    rows = efficiency_rows(report, top)
    if not rows:
        return []
    o = [
        "<details><summary>Efficiency against the roofline, by op and shape</summary>",
        "",
        f"Peaks: {md_text(efficiency_peaks(report))}. Share: time at the roofline / measured time.",
        "",
        "| op | shapes | dtype | calls/step | GPU time/step | TFLOP/s | TB/s | FLOP/B | bound | share of roofline |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        o.append(
            f"| {md_code(r['op'], 60, in_table=True)} | {md_text(r['shape'])} | {md_text(r['dtype'])} | "
            f"{md_text(r['calls'])} | {md_text(r['time'])} | {md_text(r['tflops'])} | {md_text(r['tbps'])} | "
            f"{md_text(r['intensity'])} | {md_text(r['bound'])} | {md_text(r['share'])} |"
        )
    o += ["", "</details>", ""]
    return o


def cross_rank_md(report) -> list[str]:
    """Collectives aligned across ranks: who arrives last, and each rank's wait vs own transfer."""
    c = report.cross_rank
    if not c:
        return []
    o = [
        f"### Collectives across {count(len(known(c.ranks, [])))} ranks",
        "",
        f"{count(c.matched)} collectives matched per rank; largest arrival skew "
        f"{ms(c.max_arrival_skew_us)}; clock: {md_text(known(c.clock, ''))}.",
        "",
        "| rank | last to arrive | waits in collectives | own transfer | job cost |",
        "|---:|---:|---:|---:|---:|",
    ]
    for p in known(c.per_rank, []):
        o.append(
            f"| {md_text(p.rank)}{' **(gates the step)**' if p.rank == known(c.gating_rank) else ''}"
            f" | {count(p.last_arrivals)} | {ms(p.wait_us_per_step)}/step | "
            f"{ms(p.transfer_us_per_step)}/step | {ms(p.job_cost_us_per_step)}/step |"
        )
    o.append("")
    for n in known(c.notes, [])[:5]:
        o.append(f"- {md_text(n)}")
    return o + ([""] if known(c.notes) else [])


def account_md(report) -> list[str]:
    """The explained-time account as a table: GPU idle per finding, then the unexplained rest and why."""
    a = report.account
    if not num(a.idle_us):
        return []
    o = [
        f"### Where the GPU idle time goes (explained: {pct(a.explained_frac_of_idle)} of GPU idle time)",
        "",
        "| claimed by | per step | share of the step |",
        "|---|---:|---:|",
    ]
    for p in known(a.parts, []):
        o.append(f"| {md_code(p.name, in_table=True)} | {ms(p.per_step_us)} | {pct(p.frac_of_step)} |")
    o.append(f"| unexplained | {ms(a.unexplained_per_step_us)} | {pct(a.unexplained_frac_of_step)} |")
    for r in known(a.artifacts, []):
        o.append(f"| not unexplained: {md_text(r.label)} | {ms(r.per_step_us)} | {pct(r.frac_of_step)} |")
    o.append(f"| **GPU idle** | {ms(a.idle_per_step_us)} | {pct(a.idle_frac_of_step)} |")
    o.append("")
    reasons = known(a.unexplained_reasons, [])
    for r in reasons:
        o.append(f"- unexplained {md_code(r.part)} ({ms(r.per_step_us)}/step): {md_text(r.why)}")
    if reasons:
        o.append("")
    return o


def next_bottlenecks_md(report) -> list[str]:
    """Masked causes, with their cost now and once the masking causes are fixed."""
    latent = [f for f in report.findings if f.masked_by]
    again = rediagnosed(report)
    if not latent and not again:
        return []
    c = num(known(report.steps.count))
    n = int(c) if c is not None and 1 <= c < 1e12 else 1
    o = ["### Next bottlenecks (present, masked now)", ""]
    for r in again:
        o.append(
            f"- {md_code(r.fix)} ({md_text(r.present)} now): {md_text(rediagnosed_head(r))} its fix would save "
            f"{md_text(per_step(r.saved_per_step_us))} ({pct(r.share_of_predicted)} of that step) (replay)"
            + (f". Now: {md_text(r.reason)}" if known(r.reason) else "")
        )
    if again:
        o.append("")
    if not latent:
        return o
    o += [
        "| finding | lost per step now | once fixed | masked by | severity | confidence |",
        "|---|---:|---:|---|---|---|",
    ]
    for f in latent:
        o.append(
            f"| {md_code(f.name, in_table=True)} {md_text(f.title)} | {lost(f.time_lost_per_step_us)} | "
            f"{ms((num(f.projected_lost_us) or 0.0) / n)} | "
            f"{', '.join(md_code(m, in_table=True) for m in f.masked_by)} | {md_text(sev(f))} | "
            f"{md_text(f.confidence)} |"
        )
    o.append("")
    for f in latent:
        o.append(f"- {md_code(f.name)} fix: {md_text(f.fix)}")
    o.append("")
    return o


ASSET_FILES = (("step-breakdown.svg", "Where each step goes"), ("step-timeline.svg", "One step on the GPU"))


def chart_assets(report) -> dict[str, str]:
    """File name -> SVG text for the report's charts (empty when there is nothing to draw). No I/O."""
    from . import charts

    svgs = (charts.step_breakdown(report), charts.step_timeline(report))
    return {name: svg for (name, _), svg in zip(ASSET_FILES, svgs) if svg}


def render_with_assets(report, assets_dir, *, relative_to: str | None = None) -> str:
    """The Markdown report plus its charts written as SVG files into assets_dir, linked from the text.

    Links are relative to the folder of `relative_to` (the Markdown file's path) when given, else
    assets_dir as passed. The one renderer that writes files: the CLI asked for them with --assets.
    """
    import os
    from pathlib import Path

    from ..errors import UsageError
    from . import charts

    if not charts.available():
        raise UsageError(
            "needs matplotlib to draw the charts",
            param="assets",
            value=str(assets_dir),
            hint=f"install the optional extra: {charts.INSTALL_HINT}",
        )
    files = chart_assets(report)
    out = Path(assets_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write charts into {assets_dir}: {e.strerror or e}") from None
    from ..safeio import write_atomic

    for name, svg in files.items():  # atomic, as every output: a failed write keeps the previous chart
        write_atomic(out / name, (svg + "\n").encode("utf-8"))
    text = render(report)
    if not files:
        return text
    links = []
    for name, alt in ASSET_FILES:
        if name in files:
            target = out / name
            href = (
                os.path.relpath(target, os.path.dirname(os.path.abspath(relative_to))) if relative_to else str(target)
            )
            links.append(f"![{alt}]({Path(href).as_posix()})")
    head, sep, rest = text.partition("\n| where each step goes |")
    if not sep:  # no breakdown table: charts go at the end
        return text.rstrip() + "\n\n" + "\n\n".join(links) + "\n"
    return head + "\n" + "\n\n".join(links) + "\n" + sep + rest


def blocks(sections) -> list[str]:
    """View-model sections (render/view.py) as Markdown: a level-3 heading, each block, a blank line
    after each. Report text goes through md_text(), names through md_code(), nothing else is escaped."""
    o: list[str] = []
    for sec in sections:
        o += [f"### {_spans(sec.title)}", ""]
        for b in sec.blocks:
            if isinstance(b, Para):
                o.append(_spans(b.spans))
            elif isinstance(b, KeyValue):
                o += [f"- {_spans(k)}: {_spans(v)}" for k, v in b.rows]
            else:
                for it in b.items:  # a second line as a hard line break (a trailing backslash)
                    o += [f"- {_spans(it.head)}\\", f"  {_spans(it.more)}"] if it.more else [f"- {_spans(it.head)}"]
            o.append("")
    return o


def _spans(spans) -> str:
    return "".join(md_code(p) if isinstance(p, C) else md_text(p) if isinstance(p, T) else p for p in spans)


def _sections(report, *names: str) -> list[str]:
    return blocks(view.sections(report, names))
