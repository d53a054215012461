"""Markdown for tickets and CI step summaries: names in backticks, `|` escaped, bounded size."""
from __future__ import annotations

from .common import BREAKDOWN_ORDER, evidence_value, gpu_line, ms, pct, sev

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
        o.append(f"**Verdict:** {esc(v['top_title'])}")
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
    if report.findings:
        o.append("### Findings, ranked by time lost")
        o.append("")
        o.append("| # | finding | lost per step | share | confidence |")
        o.append("|---:|---|---:|---:|---|")
        for i, f in enumerate(report.findings, 1):
            o.append(f"| {i} | {code(f.name)} {esc(f.title)} | {ms(f.time_lost_per_step_us)} | "
                     f"{pct(f.time_lost_frac)} | {f.confidence} ({sev(f)}) |")
        o.append("")
        for i, f in enumerate(report.findings, 1):
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
