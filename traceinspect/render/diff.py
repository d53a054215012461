"""Renderers for a ReportDiff: text, Markdown, JSON here; HTML in html.render_diff. No I/O.

DIFF_RENDERERS mirrors RENDERERS (same format names and extensions), so `diff -o x.md` guesses alike.
"""

from __future__ import annotations

import json

from ..inert import document, valid_unicode
from . import view_diff
from .common import fill, fit


def render_text(d, *, width: int = 100, color: bool = False) -> str:
    """The diff's view (render/view_diff.py) as text, fitted to the width as a report is."""
    from . import text

    w = max(60, min(width, 100))
    head = view_diff.header(d)
    o = [f"traceinspect diff: {text._spans(head.title)}"] + [fill(text._spans(x), w, "") for x in head.lines] + [""]
    o += text.blocks(view_diff.page(d), w)
    return fit(document("\n".join(o).rstrip()), w) + "\n"


def render_md(d, *, width: int = 100, color: bool = False) -> str:
    """The diff's view as Markdown (every value escaped in markdown.blocks)."""
    from .markdown import _spans, blocks

    head = view_diff.header(d)
    o = [f"## traceinspect diff: {_spans(head.title)}", ""] + [f"- {_spans(x)}" for x in head.lines]
    o += [""] + blocks(view_diff.page(d))
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


DIFF_RENDERERS = {
    "text": (render_text, ".txt"),
    "md": (render_md, ".md"),
    "json": (render_json, ".json"),
    "html": (render_html, ".html"),
}
