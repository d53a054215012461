"""Markdown for tickets and CI step summaries: names in code spans, every value escaped, bounded size."""

from __future__ import annotations

import html
import re

from ..findings import numbered
from ..report import Part, known
from . import view
from .view import C, KeyValue, Para, T, Table
from .common import (
    config_line,
    BREAKDOWN_ORDER,
    count,
    fix_path,
    lost,
    evidence_value,
    gpu_line,
    md_code,
    md_text,
    replay_line,
    ms,
    num,
    pct,
    plain,
    trust_line,
    sev,
    mfu_phrase,
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
    o += _sections(report, "cross_rank")
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
    o += _sections(report, "account")
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
    o += _sections(report, "next_bottlenecks", "top_kernels", "efficiency", "memory", "run_config", "ranks")
    o += _sections(report, "failures", "warnings", "skipped")
    text = "\n".join(o).rstrip() + "\n"
    if len(text.encode()) > MAX_BYTES:
        cut = text.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore")
        text = cut.rsplit("\n", 1)[0] + "\n\n_(report truncated to stay under 1 MiB)_\n"
    return text


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
    """View-model sections (render/view.py) as Markdown: a level-3 heading (a collapsed section: a
    <details> fold), each block, a blank line after each. Report text goes through md_text(), names
    through md_code() (in a table cell: cut at CODE_MAX, `|` escaped), a fold's title through html.escape."""
    o: list[str] = []
    for sec in sections:
        if sec.collapsed:
            o += [f"<details><summary>{_summary(sec.title)}</summary>", ""]
        else:
            o += [f"### {_spans(sec.title)}", ""]
        for b in sec.blocks:
            if isinstance(b, Para):
                o.append(_spans(b.spans))
            elif isinstance(b, KeyValue):
                o += [f"- {_spans(k)}: {_spans(v)}" for k, v in b.rows]
            elif isinstance(b, Table):
                o.append("| " + " | ".join(b.head) + " |")
                o.append("|" + "|".join("---:" if i in b.right else "---" for i in range(len(b.head))) + "|")
                for r in b.rows:
                    cells = (f"**{_spans(c, cell=True)}**" if r.total and c else _spans(c, cell=True) for c in r.cells)
                    o.append("| " + " | ".join(cells) + " |")
            else:
                for it in b.items:  # a second line as a hard line break (a trailing backslash)
                    o += (
                        [f"- {_item(_spans(it.head))}\\", f"  {_spans(it.more)}"]
                        if it.more
                        else [f"- {_item(_spans(it.head))}"]
                    )
            o.append("")
        if sec.collapsed:
            o += ["</details>", ""]
    return o


CODE_MAX = 90  # a name in a table cell is cut here (GitHub tables do not wrap code)


def _spans(spans, cell: bool = False) -> str:
    return "".join(
        (md_code(p, CODE_MAX, in_table=True) if cell else md_code(p))
        if isinstance(p, C)
        else md_text(p)
        if isinstance(p, T)
        else p
        for p in spans
    )


_ORDINAL = re.compile(r"^(\d+)([.)])")


def _item(s: str) -> str:
    """A list item's text: one that starts like "6. " would open an ordered list inside the item."""
    return _ORDINAL.sub(r"\1\\\2", s)


def _summary(spans) -> str:
    """A fold's title: raw HTML to GitHub (no Markdown escapes inside it), so HTML-escaped."""
    return "".join(html.escape(plain(p) if isinstance(p, T) else p, quote=False) for p in spans)


def _sections(report, *names: str) -> list[str]:
    return blocks(view.sections(report, names))
