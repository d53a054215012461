"""Markdown for tickets and CI step summaries: names in backticks, `|` escaped, bounded size."""
from __future__ import annotations

from .common import BREAKDOWN_ORDER, evidence_value, gpu_line, ms, pct, run_config_items, sev

MAX_BYTES = 1 << 20  # GitHub step summaries reject more than 1 MiB


def esc(s) -> str:
    """Escape text for a Markdown table cell or line (no HTML is ever emitted raw)."""
    s = str(s)
    for a, b in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"), ("*", "\\*"), ("_", "\\_"),
                 ("`", "'"), ("\n", " "), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return s


def code(s, limit: int = 120) -> str:
    """A kernel/op name in backticks (backticks inside are replaced; long names shortened)."""
    s = str(s).replace("`", "'").replace("\n", " ").replace("|", "\\|")
    if len(s) > limit:
        s = s[: limit - 3] + "..."
    return f"`{s}`"


def render(report, *, width: int = 100, color: bool = False) -> str:
    t, st, bd, v = report.trace, report.steps, report.breakdown, report.verdict
    o: list[str] = []
    o.append(f"## traceinspect: {esc(t.get('file', '?'))}")
    o.append("")
    o.append(f"- GPU: {esc(gpu_line(t))}; rank {t.get('rank', 0)}")
    if st.get("count"):
        o.append(f"- Window: {esc(t.get('window', ''))}; step time median **{ms(st['median_us'])}** "
                 f"(mean {ms(st['mean_us'])}, min {ms(st['min_us'])}, max {ms(st['max_us'])})")
    o.append("")
    if v.get("top"):
        o.append(f"**Verdict:** {esc(v.get('headline') or v['top_title'])}")
        o.append("")
        o.append(f"Fixing {', '.join(code(n) for n in v['expected_from'])} would bring the step to about "
                 f"**{ms(v['expected_step_us'])}** instead of {ms(v['median_step_us'])} ({esc(v['assumption'])}).")
    elif v:
        o.append(f"**Verdict:** {esc(v.get('headline', ''))}")
    o.append("")
    if bd:
        o.append("| where each step goes | per step | share |")
        o.append("|---|---:|---:|")
        for p in BREAKDOWN_ORDER:
            b = bd.get(p)
            if b and (b["us"] > 0 or p == "compute"):
                o.append(f"| {esc(b['label'])} | {ms(b['per_step_us'])} | {pct(b['frac'])} |")
        b = bd.get("gpu_busy", {})
        o.append(f"| **GPU busy** | {ms(b.get('per_step_us'))} | {pct(b.get('frac'))} |")
        o.append("")
    o += account_md(report)
    active = [f for f in report.findings if not f.masked_by]
    if active:
        o.append("### Findings, ranked by time lost weighted by confidence")
        o.append("")
        o.append("| # | finding | lost per step | share | severity | confidence |")
        o.append("|---:|---|---:|---:|---|---|")
        for i, f in enumerate(active, 1):
            o.append(f"| {i} | {code(f.name)} {esc(f.title)} | {ms(f.time_lost_per_step_us)} | "
                     f"{pct(f.time_lost_frac)} | {sev(f)} | {esc(f.confidence)} |")
        o.append("")
        for i, f in enumerate(active, 1):
            o.append(f"#### {i}. {code(f.name)} ({f.code})")
            o.append("")
            o.append(esc(f.title))
            o.append("")
            for e in f.evidence:
                win = f" _({esc(e.window)})_" if e.window else ""
                o.append(f"- {esc(e.label)}: **{esc(evidence_value(e))}**{win}")
            o.append(f"- Fix: {esc(f.fix)}")
            for ev in f.events[:3]:
                o.append(f"- e.g. {code(ev.name, 90)} at {ms(ev.ts_us)}, {ms(ev.dur_us)} on {esc(ev.track)}")
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
            o.append(f"| {code(k['name'], 90)} | {k['count']} | {ms(k['total_us'])} | {pct(k['frac_of_kernel_time'])} |")
        o.append("")
        o.append("</details>")
        o.append("")
    items = run_config_items(t)
    if items:
        o.append("<details><summary>Run configuration (recorded by traceinspect.capture)</summary>")
        o.append("")
        o.append("| setting | value |")
        o.append("|---|---|")
        for k, v in items:
            o.append(f"| {code(k)} | {esc(v)} |")
        o.append("")
        o.append("</details>")
        o.append("")
    if report.ranks and len(report.ranks) > 1:
        o.append("| rank | median step | GPU busy | top finding |")
        o.append("|---:|---:|---:|---|")
        for r in report.ranks:
            s = " **(slowest)**" if r["slowest"] else ""
            o.append(f"| {r['rank']}{s} | {ms(r['median_step_us'])} | {pct(r['gpu_busy_frac'])} | {esc(r['top_finding'] or '-')} |")
        o.append("")
    if report.failures:
        o.append("### Detectors that failed")
        for f in report.failures:
            o.append(f"- {code(f.name)}: {esc(f.error)}")
        o.append("")
    if report.warnings:
        o.append("### Data-quality warnings")
        for w in report.warnings:
            o.append(f"- {esc(w)}")
        o.append("")
    text = "\n".join(o).rstrip() + "\n"
    if len(text.encode()) > MAX_BYTES:
        cut = text.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore")
        text = cut.rsplit("\n", 1)[0] + "\n\n_(report truncated to stay under 1 MiB)_\n"
    return text


def account_md(report) -> list[str]:
    """The explained-time account as a table: GPU idle per finding, then the unexplained rest and why."""
    a = report.account
    if not a or not a.get("idle_us"):
        return []
    o = [f"### Where the GPU idle time goes (explained: {pct(a['explained_frac_of_idle'])} of GPU idle time)", "",
         "| claimed by | per step | share of the step |", "|---|---:|---:|"]
    for p in a["parts"]:
        o.append(f"| {code(p['name'])} | {ms(p['per_step_us'])} | {pct(p['frac_of_step'])} |")
    o.append(f"| unexplained | {ms(a['unexplained_per_step_us'])} | {pct(a['unexplained_frac_of_step'])} |")
    o.append(f"| **GPU idle** | {ms(a['idle_per_step_us'])} | {pct(a['idle_frac_of_step'])} |")
    o.append("")
    for r in a.get("unexplained_reasons", []):
        o.append(f"- unexplained {code(r['part'])} ({ms(r['per_step_us'])}/step): {esc(r['why'])}")
    if a.get("unexplained_reasons"):
        o.append("")
    return o


def next_bottlenecks_md(report) -> list[str]:
    """Masked causes, with their cost now and once the masking causes are fixed."""
    latent = [f for f in report.findings if f.masked_by]
    if not latent:
        return []
    n = max(int(report.steps.get("count") or 1), 1)
    o = ["### Next bottlenecks (present, masked now)", "",
         "| finding | lost per step now | once fixed | masked by | severity | confidence |",
         "|---|---:|---:|---|---|---|"]
    for f in latent:
        o.append(f"| {code(f.name)} {esc(f.title)} | {ms(f.time_lost_per_step_us)} | "
                 f"{ms((f.projected_lost_us or 0.0) / n)} | {', '.join(code(m) for m in f.masked_by)} | {sev(f)} | "
                 f"{esc(f.confidence)} |")
    o.append("")
    for f in latent:
        o.append(f"- {code(f.name)} fix: {esc(f.fix)}")
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
