"""HTML: one self-contained page (inline CSS and SVG charts, no script, no network) for a Report or a diff.

Everything that comes from a trace or a saved report goes through esc() (control characters shown as
escapes, then HTML-escaped), numbers through ms()/pct()/count(), which print only digits and units; a
Content-Security-Policy forbids scripts and remote loads, so even a missed escape cannot run code. The
canonical JSON is embedded as inert data. No I/O here.
"""

from __future__ import annotations

import html
import json

from ..inert import valid_unicode
from ..report import known
from . import charts, view
from .view_diff import Down, Up
from .view import C, Chart, Evidence, Figures, KeyValue, Para, Sub, T, Table
from .common import (
    num,
    plain,
)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
:root{--fg:#1d2330;--muted:#5b6475;--line:#dfe3ea;--bg:#fff;--soft:#f5f7fa;--high:#c44e52;--medium:#dd8452;--low:#7a8699}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0}
main{max-width:1080px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px}
.sub{color:var(--muted);margin:0}
.verdict{background:var(--soft);border-left:5px solid var(--high);padding:12px 16px;margin:18px 0;border-radius:4px}
.verdict.ok{border-left-color:#55a868}
.verdict .big{font-size:17px;font-weight:600;margin:0 0 6px}
.verdict .nums{display:flex;gap:28px;flex-wrap:wrap;margin:8px 0}
.verdict .nums div span{display:block;color:var(--muted);font-size:12px}
.verdict .nums div b{font-size:18px}
.note{color:var(--muted);font-size:12px}
.warn{background:#fff6e5;border:1px solid #f0d9a8;padding:8px 12px;border-radius:4px}
table{border-collapse:collapse;width:100%;margin:6px 0 12px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px}
td.n,th.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
code{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-all}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:baseline}
.bar{background:var(--soft);height:8px;border-radius:2px;min-width:60px}
.bar i{display:block;height:8px;background:#4c72b0;border-radius:2px}
.finding{border:1px solid var(--line);border-radius:6px;padding:12px 16px;margin:12px 0}
.sev{display:inline-block;font-size:11px;font-weight:600;color:#fff;padding:1px 7px;border-radius:9px;margin-left:6px;vertical-align:middle}
.sev.high{background:var(--high)}.sev.medium{background:var(--medium)}.sev.low{background:var(--low)}
.fix{background:#eef6ee;border-left:4px solid #55a868;padding:6px 10px;border-radius:3px}
.chart svg{max-width:100%;height:auto}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}dl.env dt{color:var(--muted)}dl.env dd{margin:0}
pre{background:var(--soft);padding:8px;overflow:auto;font-size:12px}
.up{color:#c44e52}.down{color:#2f8a45}
footer{margin-top:36px;color:var(--muted);font-size:12px}
table.ev{table-layout:fixed}table.ev td{overflow-wrap:anywhere}
table.ev td.v{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
"""


def esc(s) -> str:
    return html.escape("" if s is None else plain(s), quote=True)


def render(report, *, width: int = 100, color: bool = False) -> str:
    """The report's view (render/view.py) as one page."""
    head = view.header(report)
    body: list[str] = [
        "<header>",
        f"<h1>traceinspect: {_spans(head.title)}</h1>",
        *(f'<p class="sub">{_spans(line)}</p>' for line in head.lines),
        "</header>",
    ]
    if not charts.available():
        body.append(
            '<p class="warn" id="no-charts">Charts are not included: matplotlib is not installed '
            f"(<code>{esc(charts.INSTALL_HINT)}</code>). The tables below carry the same numbers.</p>"
        )
    body += blocks(view.page(report))
    title = f"traceinspect: {known(report.trace.file, '?')}"
    return _page(title, body, report.to_dict(), f"schema {report.schema_version}")


def render_diff(d, *, width: int = 100, color: bool = False) -> str:
    """A ReportDiff as one page: its view (render/view_diff.py), as a report's."""
    from . import view_diff

    head = view_diff.header(d)
    body = ["<header>", f"<h1>traceinspect diff: {_spans(head.title)}</h1>"]
    body += [f'<p class="sub">{_spans(x)}</p>' for x in head.lines] + ["</header>"]
    if not charts.available():
        body.append(f'<p class="note">Charts need matplotlib: <code>{esc(charts.INSTALL_HINT)}</code></p>')
    body += blocks(view_diff.page(d))
    return _page(f"traceinspect diff: {d.before.file} → {d.after.file}", body, d.to_dict(), "diff")


# --- page and small helpers -------------------------------------------------------------------------


def _page(title: str, body: list[str], payload: dict, kind: str) -> str:
    from .. import __version__

    data = json.dumps(valid_unicode(payload), sort_keys=True, separators=(",", ":"), default=_default)
    # inert data block: "<" and ">" and "&" as JSON escapes, so no "</script>" can end it early
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{CSS}</style>",
            "</head><body><main>",
            *body,
            f"<footer>traceinspect {esc(__version__)} ({esc(kind)}). This page is self-contained and opens offline; "
            "its JSON is embedded in <code>script#traceinspect-data</code>.</footer>",
            "</main>",
            f'<script type="application/json" id="traceinspect-data">{data}</script>',
            "</body></html>",
            "",
        ]
    )


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _swatch(part: str) -> str:
    c = charts.COLORS.get(part)
    return f'<span class="swatch" style="background:{c}"></span>' if c else ""


def _bar(frac, color: str | None = None) -> str:
    w = max(0.0, min(1.0, num(frac) or 0.0)) * 100
    style = f"width:{w:.1f}%" + (f";background:{color}" if color else "")
    return f'<div class="bar"><i style="{style}"></i></div>'


def _short(name: str, limit: int = 160) -> str:
    name = str(name)
    return name if len(name) <= limit else name[: limit - 1] + "…"


def blocks(sections) -> list[str]:
    """View-model sections (render/view.py) as HTML: <section id> with an <h2>, then each block. Report
    text goes through esc() (code in <code>); the section ids, classes and the words around them are ours."""
    o: list[str] = []
    for sec in sections:
        cls = f' class="{sec.cls}"' if sec.cls else ""
        o.append(f'<section{cls} id="{sec.id}">' + (f"<h2>{_spans(sec.title)}</h2>" if sec.title else ""))
        o += _blocks(sec.blocks)
        o[-1] += "</section>"
    return o


PARA = {
    "headline": '<p class="big">',
    "lead": '<p class="big">',
    "fix": '<p class="fix"><b>Fix:</b> ',
    "strong": "<p><b>",
}


def _blocks(bs) -> list[str]:
    o: list[str] = []
    for b in bs:
        if isinstance(b, Para):
            start = PARA.get(b.kind) or ('<p class="note">' if b.note else "<p>")
            o.append(start + _spans(b.spans) + ("</b></p>" if b.kind == "strong" else "</p>"))
        elif isinstance(b, KeyValue):
            o.append("<table>")
            o += [f'<tr><th scope="row">{_spans(k)}</th><td>{_spans(v)}</td></tr>' for k, v in b.rows]
            o.append("</table>")
        elif isinstance(b, Table):
            o += _table(b)
        elif isinstance(b, Evidence):
            # fixed columns: a long kernel name in a value is cut with an ellipsis (full text on hover), so
            # it cannot push the table past its card
            o.append(
                '<table class="ev"><col style="width:44%"><col style="width:30%"><col>'
                "<tr><th>evidence</th><th class=n>value</th><th>window</th></tr>"
            )
            o += [
                f'<tr><td>{_spans(k)}</td><td class="n v" title="{_spans(v)}">{_spans(v)}</td><td>{_spans(w)}</td></tr>'
                for k, v, w in b.rows
            ]
            o.append("</table>")
        elif isinstance(b, Figures):
            o.append(
                '<div class="nums">'
                + "".join(f"<div><span>{_spans(k)}</span><b>{_spans(v)}</b></div>" for k, v in b.items)
                + "</div>"
            )
        elif isinstance(b, Chart):
            svg = b.draw()
            if svg:
                o.append(f'<div class="chart" id="{b.id}">{svg}</div>')
            elif b.fallback is not None:
                o += _blocks((b.fallback,))
        elif isinstance(b, Sub):
            badge = f'<span class="sev {b.badge}">severity {b.badge}</span>' if b.badge else ""
            o.append(f'<article class="finding" id="{b.id}"><h3>{_spans(b.title)}{badge}</h3>')
            o += _blocks(b.blocks)
            o.append("</article>")
        else:
            o.append("<ul>")
            o += [f"<li>{_spans(it.head)}" + (f"<br>{_spans(it.more)}" if it.more else "") + "</li>" for it in b.items]
            o.append("</ul>")
    return o


def _table(b) -> list[str]:
    """A table: numbers right-aligned (class n), a total row in header cells, bars in a last column, a
    row's colour key as a swatch before its first cell."""

    def cell(tag: str, i: int, spans, pre: str = "") -> str:
        cls = " class=n" if i in b.right else ""
        return f"<{tag}{cls}>{pre}{_spans(spans, cell=True)}</{tag}>"

    o = [
        "<table><tr>"
        + "".join(cell("th", i, (h,)) for i, h in enumerate(b.head))
        + ("<th></th>" if b.bars else "")
        + "</tr>"
    ]
    for r in b.rows:
        tag = "th" if r.total else "td"
        tds = [cell(tag, i, c, _swatch(r.color) if i == 0 and r.color else "") for i, c in enumerate(r.cells)]
        if b.bars:
            tds.append(f"<{tag}>{_bar(r.bar, charts.COLORS.get(r.color)) if r.bar is not None else ''}</{tag}>")
        o.append("<tr>" + "".join(tds) + "</tr>")
    o[-1] += "</table>"
    return o


def _spans(spans, cell: bool = False) -> str:
    return "".join(
        _code(p, cell)
        if isinstance(p, C)
        else esc(p)
        if isinstance(p, T)
        else f'<span class="{"down" if isinstance(p, Down) else "up"}">{html.escape(p, quote=False)}</span>'
        if isinstance(p, Up)
        else html.escape(p, quote=False)
        for p in spans
    )


def _code(name, cell: bool) -> str:
    """A name in <code>; in a table cell one over 160 characters is cut, its whole text on hover."""
    if cell and len(name) > 160:
        return f'<code title="{esc(name)}">{esc(_short(name))}</code>'
    return f"<code>{esc(name)}</code>"
