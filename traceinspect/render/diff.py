"""Renderers for a ReportDiff: text, Markdown, JSON here; HTML in html.render_diff. No I/O.

DIFF_RENDERERS mirrors RENDERERS (same format names and extensions), so `diff -o x.md` guesses alike.
"""

from __future__ import annotations

import json
import textwrap

from ..inert import document, valid_unicode
from .common import count, md_code, md_text, ms, num, plain


def _verdict_line(d, arrow: str = "->") -> str:
    b, a = d.step_time_us.before, d.step_time_us.after
    if not d.speedup:
        return f"Median step {ms(b)} {arrow} {ms(a)}"
    word = "faster" if a < b else "slower" if a > b else "the same"
    noise = ""
    if d.significant is not None:
        noise = (
            f"; {'beyond' if d.significant else 'within'} step-to-step noise "
            f"(+/-{ms(d.noise_us)}, 2x the combined standard error of the medians)"
        )
    return f"Median step {ms(b)} {arrow} {ms(a)}: {d.speedup:.2f}x {word} ({d.change_pct:+.1f}%){noise}"


def render_text(d, *, width: int = 100, color: bool = False) -> str:
    # values through plain(), the page through document(), as in render/text.py
    w = max(60, min(width, 120))
    wrap = lambda s, ind="": textwrap.fill(s, w, initial_indent=ind, subsequent_indent=ind + "  ")  # noqa: E731
    o = [f"traceinspect diff: {plain(d.before.file)} -> {plain(d.after.file)}", wrap(_verdict_line(d)), ""]
    for name, side in (("before", d.before), ("after", d.after)):
        s = side.steps
        o.append(
            f"  {name:<7} {count(s.n):>4} steps  median {ms(s.median_us):>9}  mean {ms(s.mean_us):>9}  "
            f"std {ms(s.std_us):>9}  min {ms(s.min_us):>9}  max {ms(s.max_us):>9}"
        )
    o.append("")
    if d.environment:
        o.append("Why the comparison may be unfair")
        o += [
            wrap(f"- {plain(e.field)}: {plain(e.before)} -> {plain(e.after)} ({plain(e.why)})", "  ")
            for e in d.environment
        ]
        o.append("")
    if d.warnings:
        o += [wrap(f"warning: {plain(x)}") for x in d.warnings] + [""]
    if d.breakdown:
        o.append(f"  {'per step (mean)':<38} {'before':>10} {'after':>10} {'change':>10}")
        for r in d.breakdown:
            if r.before_us or r.after_us or r.part == "compute":
                o.append(
                    f"  {plain(r.label)[:38]:<38} {ms(r.before_us):>10} {ms(r.after_us):>10} {_signed(r.delta_us):>10}"
                )
        o.append("")
    if d.prediction:
        pr = d.prediction
        o.append(
            wrap(
                f"Predicted for fixing {', '.join(plain(n) for n in pr.fixes)} (replay of the before trace): "
                f"{ms(pr.predicted_us)}; measured {ms(pr.measured_us)}; error "
                f"{_signed_pct(pr.error_frac)}"
            )
        )
        o.append("")
    o.append("Findings")
    for f in d.resolved_findings:
        o.append(wrap(f"  resolved    {plain(f.name)} (was {ms(f.time_lost_per_step_us)}/step)"))
    for f in d.new_findings:
        o.append(wrap(f"  new         {plain(f.name)} ({ms(f.time_lost_per_step_us)}/step): {plain(f.title)}"))
    for f in d.persisting:
        o.append(
            wrap(
                f"  persisting  {plain(f.name)} ({ms(f.time_lost_per_step_us_before)}/step -> "
                f"{ms(f.time_lost_per_step_us_after)}/step)"
            )
        )
    for f in d.unchecked:
        o.append(wrap(f"  unchecked   {plain(f.name)} (not checked {plain(f.side)}: {plain(f.reason)})"))
    if not (d.resolved_findings or d.new_findings or d.persisting or d.unchecked):
        o.append("  none on either side")
    o.append("")
    if d.kernels:
        o.append("Kernels that moved the most (per step; '-' = not in that report's top kernels)")
        for k in d.kernels:
            o.append(
                f"  {_opt(k.before_us_per_step):>9} -> {_opt(k.after_us_per_step):>9}  "
                f"{_signed(k.delta_us_per_step):>10}  {plain(k.name)[: max(20, w - 40)]}"
            )
    return document("\n".join(o).rstrip() + "\n")


def render_md(d, *, width: int = 100, color: bool = False) -> str:
    # every value through md_text()/md_code()/ms()/count() (see render/markdown.py)
    o = [
        f"## traceinspect diff: {md_text(d.before.file)} → {md_text(d.after.file)}",
        "",
        f"**{md_text(_verdict_line(d, '→'))}**",
        "",
        "| | steps | median | mean | std | min | max |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, side in (("before", d.before), ("after", d.after)):
        s = side.steps
        o.append(
            f"| {md_text(name)} | {count(s.n)} | {ms(s.median_us)} | {ms(s.mean_us)} | "
            f"{ms(s.std_us)} | {ms(s.min_us)} | {ms(s.max_us)} |"
        )
    o.append("")
    if d.environment:
        o += ["### Why the comparison may be unfair", "", "| what | before | after | why |", "|---|---|---|---|"]
        o += [
            f"| {md_text(e.field)} | {md_text(e.before)} | {md_text(e.after)} | {md_text(e.why)} |"
            for e in d.environment
        ]
        o.append("")
    if d.warnings:
        o += [f"- warning: {md_text(x)}" for x in d.warnings] + [""]
    if d.breakdown:
        o += ["| per step (mean) | before | after | change |", "|---|---:|---:|---:|"]
        o += [
            f"| {md_text(r.label)} | {ms(r.before_us)} | {ms(r.after_us)} | {_signed(r.delta_us)} |"
            for r in d.breakdown
            if r.before_us or r.after_us or r.part == "compute"
        ]
        o.append("")
    if d.prediction:
        o += [
            f"Predicted for fixing {', '.join(md_code(n) for n in d.prediction.fixes)} (replay of the before "
            f"trace): {ms(d.prediction.predicted_us)}; measured {ms(d.prediction.measured_us)}; error "
            f"{md_text(_signed_pct(d.prediction.error_frac))}",
            "",
        ]
    o += ["### Findings", "", "| finding | status | lost per step before | after |", "|---|---|---:|---:|"]
    o += [
        f"| {md_code(f.name, in_table=True)} | resolved | {ms(f.time_lost_per_step_us)} | – |"
        for f in d.resolved_findings
    ]
    o += [
        f"| {md_code(f.name, in_table=True)} {md_text(f.title)} | new | – | {ms(f.time_lost_per_step_us)} |"
        for f in d.new_findings
    ]
    o += [
        f"| {md_code(f.name, in_table=True)} | persisting | {ms(f.time_lost_per_step_us_before)} | "
        f"{ms(f.time_lost_per_step_us_after)} |"
        for f in d.persisting
    ]
    o += [
        f"| {md_code(f.name, in_table=True)} | not checked {md_text(f.side)}: {md_text(f.reason)} | | |"
        for f in d.unchecked
    ]
    if d.kernels:
        o += [
            "",
            "<details><summary>Kernels that moved the most</summary>",
            "",
            "| kernel | before /step | after /step | change |",
            "|---|---:|---:|---:|",
        ]
        o += [
            f"| {md_code(k.name, 90, in_table=True)} | {_opt(k.before_us_per_step)} | "
            f"{_opt(k.after_us_per_step)} | {_signed(k.delta_us_per_step)} |"
            for k in d.kernels
        ]
        o += ["", "</details>"]
    return "\n".join(o).rstrip() + "\n"


def render_json(d, *, width: int = 100, color: bool = False) -> str:
    return json.dumps(valid_unicode(d.to_dict()), indent=2, sort_keys=True, default=_default) + "\n"


def render_html(d, *, width: int = 100, color: bool = False) -> str:
    from .html import render_diff

    return render_diff(d, width=width, color=color)


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _signed_pct(x) -> str:
    """A signed percentage from a fraction (numbers only; 'n/a' for anything else)."""
    return f"{100 * x:+.1f}%" if isinstance(x, (int, float)) and not isinstance(x, bool) else "n/a"


def _signed(us) -> str:
    v = num(us)
    if v is None:
        return "-"
    return ("+" if v > 0 else "") + ms(v)


def _opt(us) -> str:
    return "-" if num(us) is None else ms(us)


DIFF_RENDERERS = {
    "text": (render_text, ".txt"),
    "md": (render_md, ".md"),
    "json": (render_json, ".json"),
    "html": (render_html, ".html"),
}
