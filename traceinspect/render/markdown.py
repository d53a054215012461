"""Markdown for tickets and CI step summaries: names in code spans, every value escaped, bounded size."""

from __future__ import annotations

import html
import re

from . import view
from .view import C, Chart, Evidence, Figures, KeyValue, Para, Sub, T, Table
from .common import (
    md_code,
    md_text,
    plain,
)

MAX_BYTES = 1 << 20  # GitHub step summaries reject more than 1 MiB

# Every value below reaches the page through md_text() (lines, cells), md_code() (names in backticks)
# or ms()/pct()/count() (numbers): tests/test_injection.py renders a report whose every string is
# hostile through cmark-gfm, and checks that each interpolation here is one of those calls.


def render(report, *, width: int = 100, color: bool = False) -> str:
    """The report's view (render/view.py) as Markdown, under MAX_BYTES."""
    head = view.header(report)
    o = [f"## traceinspect: {_spans(head.title)}", ""] + [f"- {_spans(line)}" for line in head.lines] + [""]
    o += blocks(view.page(report))
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
    head, sep, rest = text.partition("\n### Where each step goes")
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
        elif sec.title:
            o += [f"### {_spans(sec.title)}", ""]
        o += _blocks(sec.blocks)
        if sec.collapsed:
            o += ["</details>", ""]
    return o


def _blocks(bs) -> list[str]:
    o: list[str] = []
    for b in bs:
        if isinstance(b, Para):
            lead = {"headline": "**Verdict:** ", "fix": "**Fix:** "}.get(b.kind, "")
            o.append(f"**{_spans(b.spans)}**" if b.kind == "strong" else f"{lead}{_spans(b.spans)}")
        elif isinstance(b, KeyValue):
            o += [f"- {_spans(k)}: {_spans(v)}" for k, v in b.rows]
        elif isinstance(b, Table):
            o.append("| " + " | ".join(b.head) + " |")
            o.append("|" + "|".join("---:" if i in b.right else "---" for i in range(len(b.head))) + "|")
            for r in b.rows:
                cells = (f"**{_spans(c, cell=True)}**" if r.total and c else _spans(c, cell=True) for c in r.cells)
                o.append("| " + " | ".join(cells) + " |")
        elif isinstance(b, Evidence):
            o += [
                f"- {_spans(k)}: **{_spans(v)}**" + (f" _({_spans(win)})_" if win and any(win) else "")
                for k, v, win in b.rows
            ]
        elif isinstance(b, Figures):
            o += [f"- {_spans(k)}: **{_spans(v)}**" for k, v in b.items]
        elif isinstance(b, Chart):
            if b.fallback is None:
                continue
            o += _blocks((b.fallback,))[:-1]
        elif isinstance(b, Sub):
            o += [f"#### {_spans(b.title)}", ""] + _blocks(b.blocks)[:-1]
        else:
            for it in b.items:  # a second line as a hard line break (a trailing backslash)
                o += (
                    [f"- {_item(_spans(it.head))}\\", f"  {_spans(it.more)}"]
                    if it.more
                    else [f"- {_item(_spans(it.head))}"]
                )
        o.append("")
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
