"""Renderers: Report -> str. No I/O, no terminal probing, no logging inside a renderer.

RENDERERS maps a format name to (render function, file extension); the CLI's --format choices and
its -o extension guess both come from here.
"""

from __future__ import annotations

# each renderer imported on its first call: a JSON report does not load the view model and the other
# formats (about 40 ms of imports); the imports stay written out, so tests/test_contract.py reads them


def _text(report, **kw) -> str:
    from .text import render

    return render(report, **kw)


def _md(report, **kw) -> str:
    from .markdown import render

    return render(report, **kw)


def _json(report, **kw) -> str:
    from .json import render

    return render(report, **kw)


def _html(report, **kw) -> str:
    from .html import render

    return render(report, **kw)


RENDERERS = {
    "text": (_text, ".txt"),
    "md": (_md, ".md"),
    "json": (_json, ".json"),
    "html": (_html, ".html"),
}


def format_for_path(path: str) -> str | None:
    for name, (_, ext) in RENDERERS.items():
        if path.endswith(ext):
            return name
    return None
