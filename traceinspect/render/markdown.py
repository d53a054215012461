"""Markdown for tickets and CI step summaries: names in code spans, every value escaped, bounded size."""
from __future__ import annotations

from .common import (BREAKDOWN_ORDER, count, evidence_value, gpu_line, md_code, md_text, memory_rows, ms, num,
                     pct, run_config_items, sev)

MAX_BYTES = 1 << 20  # GitHub step summaries reject more than 1 MiB

# Every value below reaches the page through md_text() (lines, cells), md_code() (names in backticks)
# or ms()/pct()/count() (numbers): tests/test_injection.py renders a report whose every string is
# hostile through cmark-gfm, and checks that each interpolation here is one of those calls.


def render(report, *, width: int = 100, color: bool = False) -> str:
    t, st, bd, v = report.trace, report.steps, report.breakdown, report.verdict
    o: list[str] = []
    o.append(f"## traceinspect: {md_text(t.get('file', '?'))}")
    o.append("")
    o.append(f"- GPU: {md_text(gpu_line(t))}; rank {md_text(t.get('rank', 0))}")
    if st.get("count"):
        o.append(f"- Window: {md_text(t.get('window', ''))}; step time median **{ms(st.get('median_us'))}** "
                 f"(mean {ms(st.get('mean_us'))}, min {ms(st.get('min_us'))}, max {ms(st.get('max_us'))})")
    o.append("")
    if v.get("top"):
        o.append(f"**Verdict:** {md_text(v.get('top_title', ''))}")
        o.append("")
        o.append(f"Fixing {', '.join(md_code(n) for n in v.get('expected_from', []))} would bring the "
                 f"step to about **{ms(v.get('expected_step_us'))}** instead of {ms(v.get('median_step_us'))} "
                 f"({md_text(v.get('assumption', ''))}).")
    elif v:
        o.append(f"**Verdict:** {md_text(v.get('headline', ''))}")
    o.append("")
    if bd:
        o.append("| where each step goes | per step | share |")
        o.append("|---|---:|---:|")
        for p in BREAKDOWN_ORDER:
            b = bd.get(p)
            if b and ((num(b.get("us")) or 0) > 0 or p == "compute"):
                o.append(f"| {md_text(b.get('label', p))} | {ms(b.get('per_step_us'))} | {pct(b.get('frac'))} |")
        b = bd.get("gpu_busy", {})
        o.append(f"| **GPU busy** | {ms(b.get('per_step_us'))} | {pct(b.get('frac'))} |")
        o.append("")
    if report.findings:
        o.append("### Findings, ranked by time lost")
        o.append("")
        o.append("| # | finding | lost per step | share | confidence |")
        o.append("|---:|---|---:|---:|---|")
        for i, f in enumerate(report.findings, 1):
            o.append(f"| {count(i)} | {md_code(f.name, in_table=True)} {md_text(f.title)} | "
                     f"{ms(f.time_lost_per_step_us)} | {pct(f.time_lost_frac)} | "
                     f"{md_text(f.confidence)} ({md_text(sev(f))}) |")
        o.append("")
        for i, f in enumerate(report.findings, 1):
            o.append(f"#### {count(i)}. {md_code(f.name)} ({md_text(f.code)})")
            o.append("")
            o.append(md_text(f.title))
            o.append("")
            for e in f.evidence:
                o.append(f"- {md_text(e.label)}: **{md_text(evidence_value(e))}**"
                         + (f" _({md_text(e.window)})_" if e.window else ""))
            o.append(f"- Fix: {md_text(f.fix)}")
            for ev in f.events[:3]:
                o.append(f"- e.g. {md_code(ev.name, 90)} at {ms(ev.ts_us)}, {ms(ev.dur_us)} on {md_text(ev.track)}")
            o.append("")
    else:
        o.append("No findings.")
        o.append("")
    if report.top_kernels:
        o.append("<details><summary>Top kernels</summary>")
        o.append("")
        o.append("| kernel | calls | total | share |")
        o.append("|---|---:|---:|---:|")
        for k in report.top_kernels:
            o.append(f"| {md_code(k.get('name'), 90, in_table=True)} | {count(k.get('count'))} | "
                     f"{ms(k.get('total_us'))} | {pct(k.get('frac_of_kernel_time'))} |")
        o.append("")
        o.append("</details>")
        o.append("")
    o += _memory(report)
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
            o.append(f"| {md_text(r.get('rank'))}{' **(slowest)**' if r.get('slowest') else ''} | "
                     f"{ms(r.get('median_step_us'))} | {pct(r.get('gpu_busy_frac'))} | "
                     f"{md_text(r.get('top_finding') or '-')} |")
        o.append("")
    if report.failures:
        o.append("### Detectors that failed")
        for f in report.failures:
            o.append(f"- {md_code(f.name)}: {md_text(f.error)}")
        o.append("")
    if report.warnings:
        o.append("### Data-quality warnings")
        for w in report.warnings:
            o.append(f"- {md_text(w)}")
        o.append("")
    text = "\n".join(o).rstrip() + "\n"
    if len(text.encode()) > MAX_BYTES:
        cut = text.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore")
        text = cut.rsplit("\n", 1)[0] + "\n\n_(report truncated to stay under 1 MiB)_\n"
    return text



def _memory(report) -> list[str]:
    rows = memory_rows(report.memory)
    if not rows:
        return []
    return ["### Device memory", ""] + [f"- {md_text(k)}: {md_text(v)}" for k, v in rows] + [""]


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
        raise UsageError("--assets needs matplotlib to draw the charts",
                         hint=f"install the optional extra: {charts.INSTALL_HINT}")
    files = chart_assets(report)
    out = Path(assets_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, svg in files.items():
            (out / name).write_text(svg + "\n", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write charts into {assets_dir}: {e.strerror or e}") from None
    text = render(report)
    if not files:
        return text
    links = []
    for name, alt in ASSET_FILES:
        if name in files:
            target = out / name
            href = os.path.relpath(target, os.path.dirname(os.path.abspath(relative_to))) if relative_to else str(target)
            links.append(f"![{alt}]({Path(href).as_posix()})")
    head, sep, rest = text.partition("\n| where each step goes |")
    if not sep:                      # no breakdown table: charts go at the end
        return text.rstrip() + "\n\n" + "\n\n".join(links) + "\n"
    return head + "\n" + "\n\n".join(links) + "\n" + sep + rest
