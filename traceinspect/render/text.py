"""Plain text for the terminal, readable at 100 columns."""
from __future__ import annotations

import textwrap

from .common import BREAKDOWN_ORDER, evidence_value, gpu_line, labels, ms, pct, run_config_items


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
        out.append(wrap(f"VERDICT: {v.get('headline') or v['top_title']}"))
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
    out += account_lines(report, wrap)
    active = [f for f in report.findings if not f.masked_by]
    if active:
        out.append("Findings, ranked by time lost weighted by confidence")
        for i, f in enumerate(active, 1):
            ub = " (upper bound)" if f.upper_bound else ""
            out.append(wrap(f"{i}. {f.name} ({f.code}): {ms(f.time_lost_per_step_us)}/step, "
                            f"{pct(f.time_lost_frac)} of the window{ub} [{labels(f)}]"))
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
    out += next_bottleneck_lines(report, wrap)
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
    declined = [s for s in report.skipped if s.checked]
    if declined:
        out.append(wrap("Checked, below threshold: " + "; ".join(f"{s.name} ({s.reason})" for s in declined)))
    if len(declined) < len(report.skipped):
        out.append(wrap("Not applicable: " + "; ".join(f"{s.name} ({s.reason})" for s in report.skipped
                                                       if not s.checked)))
    return "\n".join(out).rstrip() + "\n"


def account_lines(report, wrap) -> list[str]:
    """The explained-time account: GPU idle time per finding plus what stayed unexplained, and why."""
    a = report.account
    if not a or not a.get("idle_us"):
        return []
    out = [f"Where the GPU idle time goes (explained: {pct(a['explained_frac_of_idle'])} of GPU idle time; "
           f"idle {ms(a['idle_per_step_us'])} per step)"]
    for p in a["parts"]:
        out.append(f"  {p['name']:<38} {ms(p['per_step_us']):>10} {pct(p['frac_of_step']):>7} of the step")
    out.append(f"  {'unexplained':<38} {ms(a['unexplained_per_step_us']):>10} "
               f"{pct(a['unexplained_frac_of_step']):>7} of the step")
    for r in a.get("unexplained_reasons", []):
        out.append(wrap(f"- unexplained {r['part']} ({ms(r['per_step_us'])}/step): {r['why']}", "  "))
    out.append("")
    return out


def next_bottleneck_lines(report, wrap) -> list[str]:
    """Masked causes: present now but hidden behind the active ones; what they cost now and later."""
    latent = [f for f in report.findings if f.masked_by]
    if not latent:
        return []
    n = max(int(report.steps.get("count") or 1), 1)
    out = ["Next bottlenecks (present, masked now by the causes above)"]
    for i, f in enumerate(latent, 1):
        proj = (f.projected_lost_us or 0.0) / n
        out.append(wrap(f"{i}. {f.name} ({f.code}): {ms(f.time_lost_per_step_us)}/step now, about {ms(proj)}/step "
                        f"once {', '.join(f.masked_by)} is fixed [{labels(f)}]"))
        out.append(wrap(f.title, "   "))
        out.append(wrap(f"Fix: {f.fix}", "   "))
        out.append("")
    return out
