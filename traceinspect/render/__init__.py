"""Renderers: Report -> str. No I/O, no terminal probing, no logging inside a renderer.

RENDERERS maps a format name to (render function, file extension); the CLI's --format choices and
its -o extension guess both come from here.
"""

from __future__ import annotations

from . import html as _html
from . import json as _json
from . import markdown as _md
from . import text as _text

RENDERERS = {
    "text": (_text.render, ".txt"),
    "md": (_md.render, ".md"),
    "json": (_json.render, ".json"),
    "html": (_html.render, ".html"),
}


def format_for_path(path: str) -> str | None:
    for name, (_, ext) in RENDERERS.items():
        if path.endswith(ext):
            return name
    return None
