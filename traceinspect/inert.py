"""Untrusted text made inert: the one place that says how a name, path or value from a trace, a saved
report or a cache entry is shown in text (terminal or file) and in Markdown. No I/O, no package imports:
errors.py, tensorboard.py, cli.py and every renderer build on it. HTML escaping is html.escape over text().

Rules (docs/security.md, "Output is inert"):
- text(): control characters (C0, DEL, C1: ESC starts terminal sequences; 0x9b/0x9d are CSI/OSC on
  their own), Unicode line and paragraph separators, bidirectional overrides and lone surrogates (a
  file name that is not UTF-8) become visible escapes such as \\x1b, \\r, \\u202e, \\xff. Nothing else
  changes, so the result is still the name a user searches for.
- md_text(): text(), then every character that can open or close a Markdown construct is escaped with
  a form both CommonMark/GFM and Python-Markdown (TensorBoard) honour, and GFM's extended autolinks are
  broken with an invisible U+2060 WORD JOINER where the GFM grammar forbids any character.
- md_code(): text() in a code span whose backtick fence is longer than any backtick run inside.
"""

from __future__ import annotations

import math
import numbers
import re

# C0, DEL, C1; U+2028/2029 (line breaks to some renderers); bidi embeddings, overrides and isolates
# (text that reads differently than it is, "Trojan Source"); surrogates (only lone ones reach a str:
# json pairs valid ones, and os.fsdecode maps each undecodable byte to U+DC80..U+DCFF).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    cp = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= cp <= 0xDCFF:  # surrogateescape: show the original byte, as backslashreplace does
        return f"\\x{cp - 0xDC00:02x}"
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def text(s, keep: str = "") -> str:
    """str(s) with every unsafe character shown as a visible escape (characters in `keep` stay)."""
    s = s if isinstance(s, str) else str(s)
    if keep:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), s)
    return _UNSAFE.sub(lambda m: _escape(m.group()), s)


def num(x) -> float | None:
    """An untrusted report number as a float, or None when missing or not a number (a string, NaN)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):  # numpy scalars too
        return None
    x = float(x)
    return None if math.isnan(x) else x


def document(s: str) -> str:
    """A whole rendered document: unsafe characters escaped, its own newlines and tabs kept."""
    return text(s, keep="\n\t")


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(obj):
    """A copy of a JSON-shaped value whose strings encode as UTF-8: lone surrogates shown as escapes.

    JSON output keeps control characters (json.dumps escapes them as \\u00XX), but a lone surrogate
    escape is invalid I-JSON (RFC 7493) and strict parsers reject it.
    """
    if isinstance(obj, str):
        return _SURROGATE.sub(lambda m: _escape(m.group()), obj)
    if isinstance(obj, dict):
        return {valid_unicode(k) if isinstance(k, str) else k: valid_unicode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [valid_unicode(v) for v in obj]
    return obj


# --- Markdown ------------------------------------------------------------------------------------------
# Backslash escapes: CommonMark allows one before any ASCII punctuation; these are also in Python-Markdown's
# list (TensorBoard renders with it), where `|` comes with the tables extension. The rest as character
# references, which CommonMark never reads as structure (spec 6.2) and Python-Markdown passes to HTML.
_MD_ESCAPES = {c: "\\" + c for c in "\\`*_[]!|"}
_MD_ESCAPES.update({"&": "&amp;", "<": "&lt;", ">": "&gt;", "~": "&#126;", "$": "&#36;"})
_MD_SPECIAL = re.compile("[" + re.escape("".join(_MD_ESCAPES)) + "]")
# GFM extended autolinks (spec 6.9): an email needs an alphanumeric, `-` or `_` right after `@`; a URL
# needs the literal `://` after its scheme; a www link the literal `www.`. A U+2060 there fails each
# rule (it is none of those characters); it also stops @mentions. Angle autolinks need `<`, escaped above.
_AUTOLINK = re.compile(r"@|:(?=/)|(?<=www)(?=\.)", re.IGNORECASE)
_WJ = "\u2060"
# at the start of a line: headings, list items, setext underlines
_LINE_START = re.compile(r"^( *)(?:([-+=#])|(\d{1,9})([.)])(?= |$))")


def md_text(s) -> str:
    """Untrusted text for a Markdown line, list item, heading or table cell: renders as itself, inert."""
    s = _AUTOLINK.sub(lambda m: m.group() + _WJ, text(s))
    s = _MD_SPECIAL.sub(lambda m: _MD_ESCAPES[m.group()], s)
    return _LINE_START.sub(_line_start, s, count=1)


def _line_start(m: re.Match) -> str:
    if m.group(2):
        return m.group(1) + ("&#61;" if m.group(2) == "=" else "\\" + m.group(2))
    return m.group(1) + m.group(3) + "\\" + m.group(4)


_BACKTICKS = re.compile("`+")


def md_code(s, limit: int | None = None, *, in_table: bool = False) -> str:
    """Untrusted text as a Markdown code span (a kernel or op name), shortened to `limit` characters.

    Nothing ends it early: the fence is one backtick longer than the longest run inside, and no line
    break survives text(). Inside a table, `|` is escaped: GFM splits cells before it sees code spans.
    """
    s = text(s)
    if limit and len(s) > limit:
        s = s[: limit - 3] + "..."
    if in_table:
        s = s.replace("|", "\\|")
    fence = "`" * (max((len(r) for r in _BACKTICKS.findall(s)), default=0) + 1)
    if not s.strip(" "):
        s = s or " "
    elif s[0] == "`" or s[-1] == "`" or (s[0] == " " and s[-1] == " "):
        s = f" {s} "  # CommonMark strips one space from each side
    return f"{fence}{s}{fence}"
