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

from ..findings import numbered
from ..report import known
from .common import (
    count,
    efficiency_peaks,
    efficiency_rows,
    lost,
    memory_rows,
    ms,
    num,
    pct,
    per_step,
    quality_rows,
    rediagnosed,
    rediagnosed_head,
    run_config_items,
    sev,
)


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


@dataclass(frozen=True, slots=True)
class Row:
    cells: tuple  # of Spans, one per column
    total: bool = False  # a total line (Markdown: bold; HTML: header cells)
    bar: float | None = None  # a fraction drawn as a bar where the table has bars (HTML, text)
    color: str | None = None  # the bar's and swatch's colour key (a timeline part), HTML only


@dataclass(frozen=True, slots=True)
class Table:
    head: tuple  # of str: the column titles (our words)
    rows: tuple  # of Row
    right: tuple = ()  # the columns of numbers (right-aligned)
    narrow: tuple = ()  # the columns a 100-column terminal shows, in that order (empty: all)
    bars: bool = False  # each row's `bar` drawn in a last column


Block = Union[Para, KeyValue, Items, Table]


@dataclass(frozen=True, slots=True)
class Section:
    id: str  # the HTML anchor: our word, never the report's
    title: Spans
    blocks: tuple  # of Block
    collapsed: bool = False  # reference detail: Markdown folds it in <details>


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


def _join(names) -> tuple:
    """Names as code, comma-separated: a tuple of pieces."""
    out: list = []
    for i, n in enumerate(names):
        out += [", "] * bool(i) + [C(n)]
    return tuple(out)


def cross_rank(report) -> Section | None:
    """Collectives aligned across ranks: who arrives last, and each rank's wait against its own transfer."""
    c = report.cross_rank
    if not c:
        return None
    gate = known(c.gating_rank)
    rows = tuple(
        Row(
            (
                (T(p.rank),),
                (count(p.last_arrivals),),
                (ms(p.wait_us_per_step), "/step"),
                (ms(p.transfer_us_per_step), "/step"),
                (ms(p.job_cost_us_per_step), "/step"),
                ("gates the step" if p.rank == gate else "",),
            )
        )
        for p in known(c.per_rank, [])
    )
    blocks = [
        Para(
            (
                count(c.matched),
                " collectives matched per rank; largest arrival skew ",
                ms(c.max_arrival_skew_us),
                "; clock: ",
                T(known(c.clock, "")),
                ".",
            ),
            note=True,
        ),
        Table(
            ("rank", "last to arrive", "waits in collectives", "own transfer", "job cost", ""), rows, (0, 1, 2, 3, 4)
        ),
    ]
    notes = known(c.notes, [])[:5]
    if notes:
        blocks.append(Items(tuple(Item((T(n),)) for n in notes)))
    return Section("cross-rank", ("Collectives across ", count(len(known(c.ranks, []))), " ranks"), tuple(blocks))


def account(report) -> Section | None:
    """The explained-time account: GPU idle time per finding, the unexplained rest, and why."""
    a = report.account
    if not num(a.idle_us):
        return None
    rows = [Row(((C(p.name),), (ms(p.per_step_us),), (pct(p.frac_of_step),))) for p in known(a.parts, [])]
    rows.append(Row((("unexplained",), (ms(a.unexplained_per_step_us),), (pct(a.unexplained_frac_of_step),))))
    rows += [
        Row((("not unexplained: ", T(r.label)), (ms(r.per_step_us),), (pct(r.frac_of_step),)))
        for r in known(a.artifacts, [])
    ]
    rows.append(Row((("GPU idle",), (ms(a.idle_per_step_us),), (pct(a.idle_frac_of_step),)), total=True))
    blocks = [
        Para(
            (
                "explained: ",
                pct(a.explained_frac_of_idle),
                " of GPU idle time (",
                ms(a.idle_per_step_us),
                " per step, ",
                pct(a.idle_frac_of_step),
                " of the step)",
            ),
            note=True,
        ),
        Table(("claimed by", "per step", "share of the step"), tuple(rows), (1, 2)),
    ]
    reasons = known(a.unexplained_reasons, [])
    if reasons:
        blocks.append(
            Items(
                tuple(Item(("unexplained ", C(r.part), " (", ms(r.per_step_us), "/step): ", T(r.why))) for r in reasons)
            )
        )
    return Section("account", ("Where the GPU idle time goes",), tuple(blocks))


def next_bottlenecks(report) -> Section | None:
    """Causes present now but masked: asked again in the predicted run (the re-diagnosis), and the
    findings hidden behind the active ones, with their cost now and once those are fixed."""
    latent = [(i, f) for i, f in numbered(report.findings) if f.masked_by]
    again = rediagnosed(report)
    if not latent and not again:
        return None
    blocks: list = []
    if again:
        blocks.append(
            Items(
                tuple(
                    Item(
                        (
                            C(r.fix),
                            " (",
                            T(r.present),
                            " now): ",
                            T(rediagnosed_head(r)),
                            " its fix would save ",
                            per_step(r.saved_per_step_us),
                            " (",
                            pct(r.share_of_predicted),
                            " of that step) (replay)",
                        ),
                        ("now: ", T(r.reason)) if known(r.reason) else (),
                    )
                    for r in again
                )
            )
        )
    if latent:
        c = num(known(report.steps.count))
        n = int(c) if c is not None and 1 <= c < 1e12 else 1
        rows = tuple(
            Row(
                (
                    (count(i),),
                    (C(f.name),),
                    (lost(f.time_lost_per_step_us),),
                    (ms((num(f.projected_lost_us) or 0.0) / n),),
                    _join(f.masked_by),
                    (T(sev(f)),),
                    (T(f.confidence),),
                )
            )
            for i, f in latent
        )
        head = ("#", "finding", "lost per step now", "once fixed", "masked by", "severity", "confidence")
        blocks.append(Table(head, rows, (0, 2, 3), narrow=(0, 1, 2, 3, 5, 6, 4)))
        blocks.append(
            Items(
                tuple(
                    Item((count(i), ". ", C(f.name), " (", T(f.code), "): ", T(f.title)), ("Fix: ", T(f.fix)))
                    for i, f in latent
                )
            )
        )
    return Section("next-bottlenecks", ("Next bottlenecks (present, masked now)",), tuple(blocks))


def top_kernels(report) -> Section | None:
    if not report.top_kernels:
        return None
    rows = tuple(
        Row(
            ((C(k.name),), (count(k.count),), (ms(k.total_us),), (ms(k.median_us),), (pct(k.frac_of_kernel_time),)),
            bar=num(k.frac_of_kernel_time),
        )
        for k in report.top_kernels
    )
    head = ("kernel", "calls", "total", "median", "share of kernel time")
    return Section(
        "kernels", ("Top kernels",), (Table(head, rows, (1, 2, 3, 4), narrow=(2, 4, 1, 0), bars=True),), collapsed=True
    )


def efficiency(report, top: int = 10) -> Section | None:
    """The top rows of the per-shape efficiency table against the roofline."""
    rows = efficiency_rows(report, top)
    if not rows:
        return None
    head = ("op", "shapes", "dtype", "calls/step", "GPU time/step", "TFLOP/s", "TB/s", "FLOP/B", "bound")
    head += ("share of roofline",)
    cells = tuple(
        Row(
            (
                (C(r["op"]),),
                (T(r["shape"]),),
                (T(r["dtype"]),),
                (r["calls"],),
                (r["time"],),
                (r["tflops"],),
                (r["tbps"],),
                (r["intensity"],),
                (T(r["bound"]),),
                (r["share"],),
            )
        )
        for r in rows
    )
    blocks = (
        Para(("Peaks: ", T(efficiency_peaks(report)), ". Share: time at the roofline / measured time."), note=True),
        Table(head, cells, (3, 4, 5, 6, 7, 9), narrow=(4, 9, 5, 6, 8, 0, 2, 1)),
    )
    return Section("efficiency", ("Efficiency against the roofline, by op and shape",), blocks, collapsed=True)


def run_config(report) -> Section | None:
    items = run_config_items(report.trace)
    if not items:
        return None
    return Section(
        "run-config",
        ("Run configuration (recorded by traceinspect.capture)",),
        (KeyValue(tuple(((C(k),), (T(v),)) for k, v in items)),),
        collapsed=True,
    )


def ranks(report) -> Section | None:
    if not report.ranks or len(report.ranks) < 2:
        return None
    rows = tuple(
        Row(
            (
                (T(known(r.rank)),),
                (ms(known(r.median_step_us)),),
                (pct(known(r.gpu_busy_frac)),),
                (C(known(r.top_finding) or "-"),),
                (", ".join(m for m, on in (("gates the step", known(r.gating)), ("slowest", known(r.slowest))) if on),),
                (T(known(r.file)),),
            )
        )
        for r in report.ranks
    )
    return Section(
        "ranks", ("Ranks",), (Table(("rank", "median step", "GPU busy", "top finding", "", "file"), rows, (0, 1, 2)),)
    )


def sections(report, names) -> list[Section]:
    """The named sections that this report has, in that order."""
    return [s for s in (BUILDERS[n](report) for n in names) if s is not None]


BUILDERS = {
    "cross_rank": cross_rank,
    "account": account,
    "next_bottlenecks": next_bottlenecks,
    "top_kernels": top_kernels,
    "efficiency": efficiency,
    "run_config": run_config,
    "ranks": ranks,
    "memory": memory,
    "quality": quality,
    "failures": failures,
    "warnings": warnings,
    "skipped": skipped,
}
