"""The view model: a report section as typed blocks, built once and printed by every format.

A builder here turns part of a Report into a `Section` of blocks (paragraph, key-value rows, items);
render/text.py, render/markdown.py and render/html.py each print blocks with their own escaping
(inert.py), in one place per format (`text.blocks`, `markdown.blocks`, `html.blocks`). A section is
written once, here, instead of once per format.

Untrusted text is carried as such: a piece of a line (`Spans`) is either `T` (text from the report:
names, reasons, messages; escaped for the format it goes into), `C` (a name from the report shown as
code: a detector, a check) or a bare `str`, which is the builder's own words and numbers formatted by
common.ms()/pct()/count() (digits, units and the words written here). tests/test_view.py renders a
report whose every string is hostile and checks that none of it reaches a bare `str`.

Sections not yet built here are still written by each renderer (issue 31 moves them one by one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..report import known
from .common import memory_rows, quality_rows


class T(str):
    """Untrusted text from a report (any value: None is "", others their str())."""

    __slots__ = ()

    def __new__(cls, value=""):
        return super().__new__(cls, "" if value is None else value if isinstance(value, str) else str(value))


class C(T):
    """An untrusted name from a report, shown as code."""

    __slots__ = ()


Piece = Union[str, T, C]
Spans = tuple  # of Piece


@dataclass(frozen=True, slots=True)
class Para:
    spans: Spans
    note: bool = False  # a secondary remark (HTML: class="note")


@dataclass(frozen=True, slots=True)
class KeyValue:
    rows: tuple  # of (Spans, Spans)


@dataclass(frozen=True, slots=True)
class Item:
    head: Spans
    more: Spans = ()  # a second line under the item (text: indented; Markdown: a hard break)


@dataclass(frozen=True, slots=True)
class Items:
    items: tuple  # of Item


Block = Union[Para, KeyValue, Items]


@dataclass(frozen=True, slots=True)
class Section:
    id: str  # the HTML anchor: our word, never the report's
    title: Spans
    blocks: tuple  # of Block


def memory(report) -> Section | None:
    rows = memory_rows(report.memory)
    if not rows:
        return None
    return Section("memory", ("Device memory",), (KeyValue(tuple(((T(k),), (T(v),)) for k, v in rows)),))


def quality(report) -> Section | None:
    """The trace-quality checks: what each measured, and what the report does about the ones not ok."""
    rows = quality_rows(report)
    if not rows:
        return None
    items = tuple(
        Item((C(check), " (", T(status), "): ", T(summary)), ("so: ", T(effect)) if effect else ())
        for check, status, summary, effect in rows
    )
    return Section("trace-quality", ("Trace quality: ", T(known(report.trace_quality.status, ""))), (Items(items),))


def failures(report) -> Section | None:
    if not report.failures:
        return None
    items = tuple(Item((C(f.name), " (", T(f.code), "): ", T(f.error))) for f in report.failures)
    return Section(
        "failures", ("Detectors that failed",), (Para(("Their causes were not checked.",), note=True), Items(items))
    )


def warnings(report) -> Section | None:
    if not report.warnings:
        return None
    return Section("warnings", ("Data-quality warnings",), (Items(tuple(Item((T(w),)) for w in report.warnings)),))


def skipped(report) -> Section | None:
    if not report.skipped:
        return None
    items = tuple(
        Item((C(s.name), " (", T(s.code), "): ", "checked, below threshold: " if s.checked else "", T(s.reason)))
        for s in report.skipped
    )
    return Section("skipped", ("Checked below threshold, or not applicable",), (Items(items),))


def sections(report, names) -> list[Section]:
    """The named sections that this report has, in that order."""
    return [s for s in (BUILDERS[n](report) for n in names) if s is not None]


BUILDERS = {
    "memory": memory,
    "quality": quality,
    "failures": failures,
    "warnings": warnings,
    "skipped": skipped,
}
