"""Plain text for the terminal, readable at 100 columns."""
from __future__ import annotations

import textwrap

from .common import BREAKDOWN_ORDER, evidence_value, gpu_line, ms, pct, run_config_items, sev


def render(report, *, width: int = 100, color: bool = False) -> str:
    t, st, bd, v = report.trace, report.steps, report.breakdown, report.verdict
    w = max(60, min(width, 120))
    out: list[str] = []
    wrap = lambda s, ind="": textwrap.fill(s, w, initial_indent=ind, subsequent_indent=ind + "  ")  # noqa: E731
    out.append(f"traceinspect report: {t.get('file', '?')}  (rank {t.get('rank', 0)}, {gpu_line(t)})")
    if st.get("count"):
        out.append(wrap(f"Window: {t.get('window', '')}; step time median {ms(st['median_us'])} "
                        f"(mean {ms(st['mean_us'])}, min {ms(st['min_us'])}, max {ms(st['max_us'])}), "
                        f"steps from {st['source']}"))
    out.append("")
    if v.get("top"):
        out.append(wrap(f"VERDICT: {v['top_title']}"))
        out.append(wrap(f"Fixing {', '.join(v['expected_from'])} would bring the step to about "
                        f"{ms(v['expected_step_us'])} instead of {ms(v['median_step_us'])} "
                        f"({v['assumption']}).", "  "))
    elif v:
        out.append(wrap(v.get("headline", "")))
    out.append("")
    if bd:
        out.append("Where each step goes (mean per step)")
        busy = bd.get("gpu_busy", {})
        for p in BREAKDOWN_ORDER:
            b = bd.get(p)
            if not b or (b["us"] == 0 and p not in ("compute",)):
                continue
            bar = "#" * int(round(30 * b["frac"]))
            out.append(f"  {b['label']:<38} {ms(b['per_step_us']):>10} {pct(b['frac']):>7}  {bar}")
        out.append(f"  {'GPU busy':<38} {ms(busy.get('per_step_us')):>10} {pct(busy.get('frac')):>7}")
        out.append("")
    if report.findings:
        out.append("Findings, ranked by time lost")
        for i, f in enumerate(report.findings, 1):
            ub = " (upper bound)" if f.upper_bound else ""
            out.append(wrap(f"{i}. [{sev(f)}] {f.name} ({f.code}): {ms(f.time_lost_per_step_us)}/step, "
                            f"{pct(f.time_lost_frac)} of the window{ub}; confidence {f.confidence}"))
            out.append(wrap(f.title, "   "))
            for e in f.evidence:
                win = f" [{e.window}]" if e.window else ""
                out.append(wrap(f"- {e.label}: {evidence_value(e)}{win}", "   "))
            out.append(wrap(f"Fix: {f.fix}", "   "))
            for ev in f.events[:3]:
                out.append(wrap(f"e.g. {ev.name[:80]} at {ms(ev.ts_us)} for {ms(ev.dur_us)} on {ev.track}", "   "))
            out.append("")
    else:
        out.append("No findings.")
        out.append("")
    items = run_config_items(t)
    if items:
        out.append("Run configuration (recorded by traceinspect.capture)")
        out.append(wrap(", ".join(f"{k}={v}" for k, v in items), "  "))
        out.append("")
    if report.ranks and len(report.ranks) > 1:
        out.append("Ranks")
        for r in report.ranks:
            mark = "  <- slowest" if r["slowest"] else ""
            out.append(f"  rank {r['rank']:>3}  median step {ms(r['median_step_us']):>10}  "
                       f"busy {pct(r['gpu_busy_frac']):>7}  top: {r['top_finding'] or '-'}{mark}")
        out.append("")
    if report.failures:
        out.append("Detectors that failed (their causes were not checked)")
        for f in report.failures:
            out.append(wrap(f"- {f.name}: {f.error}", "  "))
        out.append("")
    if report.warnings:
        out.append("Data-quality warnings")
        for wmsg in report.warnings:
            out.append(wrap(f"- {wmsg}", "  "))
        out.append("")
    if report.skipped:
        out.append(wrap("Not applicable: " + "; ".join(f"{s.name} ({s.reason})" for s in report.skipped)))
    return "\n".join(out).rstrip() + "\n"
