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
from ..sections import NO_GPU
from ..report import known
from .common import (
    BREAKDOWN_ORDER,
    config_line,
    count,
    evidence_value,
    fix_path,
    gpu_line,
    mfu_phrase,
    replay_line,
    speed_of_light,
    trust_line,
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
    # "headline" (the verdict naming a cause: labelled), "lead" (a verdict naming none), "strong" (bold),
    # "fix" (a finding's fix, labelled "Fix:")
    kind: str = ""


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


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a finding measured: (label, value, window) per row, each Spans."""

    rows: tuple


@dataclass(frozen=True, slots=True)
class Figures:
    """A few headline numbers, (label, value Spans) each: HTML draws them as figures, the others as a line."""

    items: tuple


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart drawn where the format can draw it (HTML, with matplotlib): `draw()` gives its SVG or "".
    A format that cannot draw shows `fallback` (a block carrying the same numbers), if any."""

    id: str
    draw: object  # () -> str
    fallback: object = None  # a Block, or None: the section's other blocks carry the numbers


@dataclass(frozen=True, slots=True)
class Sub:
    """A section inside a section (a finding): numbered title, badge (our word: a severity), blocks."""

    id: str
    title: Spans
    blocks: tuple
    badge: str = ""


Block = Union[Para, KeyValue, Items, Table, Evidence, Figures, Chart, Sub]


@dataclass(frozen=True, slots=True)
class Header:
    """The page's head: its title and the lines under it (the formats' own chrome prints them)."""

    title: Spans
    lines: tuple  # of Spans


@dataclass(frozen=True, slots=True)
class Section:
    id: str  # the HTML anchor: our word, never the report's
    title: Spans
    blocks: tuple  # of Block
    collapsed: bool = False  # reference detail: Markdown folds it in <details>
    cls: str = ""  # the HTML class of the section (the verdict's box), our word


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


def codes(names) -> tuple:
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
    j = known(c.job)
    if j:
        blocks += _job_blocks(j)
    notes = known(c.notes, [])[:5]
    if notes:
        blocks.append(Items(tuple(Item((T(n),)) for n in notes)))
    return Section("cross-rank", ("Collectives across ", count(len(known(c.ranks, []))), " ranks"), tuple(blocks))


def _job_blocks(j) -> list:
    """The job replay: the job's step after each change, and the identity's error per rank."""
    rows = tuple(
        Row(((T(p.what),), (ms(p.step_us),), (ms(p.saved_per_step_us),), (pct(p.saved_frac),))) for p in j.predictions
    )
    worst = max(j.per_rank, key=lambda p: p.error_frac) if j.per_rank else None
    lead = (
        "Job replay (the ranks replayed together, joined at their collectives): job step ",
        ms(j.replayed_step_us),
        " replayed against ",
        ms(j.measured_step_us),
        " measured (the slowest rank's median step); identity error at most ",
        pct(j.max_error_frac),
        *((" (rank ", T(worst.rank), ")") if worst is not None and worst.error_frac >= 0.0005 else ()),
        ".",
    )
    out = [Para(lead, note=True)]
    if rows:
        out.append(Table(("if", "job step", "saves", "share"), rows, (1, 2, 3)))
    return out


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
    """Causes present now and not on the fix path, asked again in the predicted run (the re-diagnosis,
    verdict.rediagnose): what each would save once the path's fixes are in, by the replay."""
    again = rediagnosed(report)
    if not again:
        return None
    blocks: list = [
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
                    ("now: ", T(r.reason)) if r.reason else (),
                )
                for r in again
            )
        )
    ]
    return Section("next-bottlenecks", ("Next bottlenecks (the predicted run, diagnosed again)",), tuple(blocks))


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
                (T(r.rank),),
                (ms(r.median_step_us),),
                (pct(r.gpu_busy_frac),),
                (C(r.top_finding or "-"),),
                (", ".join(m for m, on in (("gates the step", known(r.gating)), ("slowest", r.slowest)) if on),),
                (T(r.file),),
            )
        )
        for r in report.ranks
    )
    return Section(
        "ranks", ("Ranks",), (Table(("rank", "median step", "GPU busy", "top finding", "", "file"), rows, (0, 1, 2)),)
    )


def header(report) -> Header:
    t, st = report.trace, report.steps
    lines = [("GPU: ", T(gpu_line(t)), "; rank ", T(known(t.rank, 0)))]
    if known(st.count):
        lines.append(
            (
                "Window: ",
                T(known(t.window, "")),
                "; step time median ",
                ms(known(st.median_us)),
                " (mean ",
                ms(known(st.mean_us)),
                ", min ",
                ms(known(st.min_us)),
                ", max ",
                ms(known(st.max_us)),
                "), steps from ",
                T(known(st.source)),
            )
        )
    if config_line(report):
        lines.append((T(config_line(report)),))
    return Header((T(known(t.file, "?")),), tuple(lines))


def verdict(report) -> Section:
    """The headline: the top cause, what it costs, the step now and predicted, the fix path and its model."""
    v, st = report.verdict, report.steps
    blocks: list = []
    if trust_line(report):
        blocks.append(Para((T(trust_line(report)),), kind="strong"))
    if not v:
        blocks.append(Para(("No steps to analyse.",), kind="lead"))
        return Section("verdict", (), tuple(blocks), cls="verdict ok")
    if not known(v.top):  # no cause named: the headline says why, without the word "verdict"
        blocks.append(Para((T(known(v.headline, "")),), kind="lead"))
        blocks.append(Para(("median step ", ms(v.median_step_us), " over ", count(known(st.count, 0)), " steps"), True))
        return Section("verdict", (), tuple(blocks), cls="verdict ok")
    blocks.append(Para((T(known(v.headline) or known(v.top_title, "")),), kind="headline"))
    sol = speed_of_light(v)
    light = (
        (ms(sol.sol_us), " (", mfu_phrase(sol), ")")
        if sol.sol_us is not None
        else ("unknown: ", T(sol.why or "no model"))
    )
    figures = [
        (("top cause",), (C(v.top),)),
        (("costs per step",), (ms(v.top_per_step_us), " (", pct(v.top_frac), ")")),
        (("median step now",), (ms(v.median_step_us),)),
        (("predicted after these fixes",), (ms(v.expected_step_us),)),
    ]
    if known(v.path):
        figures.append((("speed of light",), light))
    blocks.append(Figures(tuple(figures)))
    path = fix_path(v)
    if path:
        spans: list = ["Fix in rank order: "]
        for k, p in enumerate(path):
            spans += ["; then "] * bool(k) + [C(p.fix), ": ", ms(p.from_us), " -> ", ms(p.to_us), " (", T(p.model), ")"]
        blocks.append(Para(tuple(spans) + (".",)))
    blocks.append(
        Para(("Fixing ",) + codes(known(v.expected_from, [])) + ("; ", T(known(v.assumption, "")), "."), True)
    )
    if replay_line(v):
        blocks.append(Para((T(replay_line(v)), "."), True))
    return Section("verdict", (), tuple(blocks), cls="verdict")


def breakdown(report) -> Section | None:
    from . import charts

    bd = report.breakdown
    if not bd:
        return None
    rows = [
        Row(
            ((T(b.label),), (ms(b.per_step_us),), (pct(b.frac),)),
            bar=num(b.frac),
            color=p,
        )
        for p, b in ((p, bd.get(p)) for p in BREAKDOWN_ORDER)
        if b and ((num(b.us) or 0) > 0 or p == "compute")
    ]
    busy = bd.get("gpu_busy")
    if busy:
        rows.append(Row((("GPU busy",), (ms(busy.per_step_us),), (pct(busy.frac),)), total=True))
    return Section(
        "breakdown",
        ("Where each step goes (mean per step)",),
        (
            Chart("chart-breakdown", lambda: charts.step_breakdown(report)),
            Table(("part", "per step", "share"), tuple(rows), (1, 2), bars=True),
        ),
    )


def timeline(report) -> Section | None:
    """One representative step on the GPU: a chart where one can be drawn, else its parts as a table."""
    from . import charts

    ts = report.timeline_sample
    if not ts:
        if not report.breakdown:
            return None
        note = (
            "This report carries no timeline sample (it was saved by an older traceinspect, or analysed without one)."
        )
        return Section("timeline", ("One step on the GPU",), (Para((note,), True),))
    iv = known(ts.intervals, {})
    rows = tuple(
        Row(((charts.SHORT[p],), (count(len(iv[p])),), (ms(sum(b - a for a, b in iv[p])),)), color=p)
        for p in BREAKDOWN_ORDER
        if iv.get(p)
    )
    dropped = known(ts.dropped)
    note = (
        "ProfilerStep#",
        T(known(ts.step)),
        ", the ",
        T(known(ts.choice, "representative step")),
        " (",
        ms(ts.dur_us),
        "): GPU busy time by kind of work, and idle gaps coloured by their cause. Drawn in columns of ",
        ms(ts.resolution_us),
        ": in each, every part is as wide as its time there",
        *(("; the ", count(dropped), " shortest were left out") if dropped else ()),
        ".",
    )
    table = Table(("part", "intervals", "time"), rows, (1, 2))
    return Section(
        "timeline",
        ("One step on the GPU",),
        (Para(note, True), Chart("chart-timeline", lambda: charts.step_timeline(report), fallback=table)),
    )


def findings(report) -> Section:
    active = numbered(report.findings)
    if not active:
        return Section("findings", ("Findings",), (Para(("No findings.",)),))
    summary = Table(
        ("#", "finding", "lost per step", "share", "severity", "confidence"),
        tuple(
            Row(
                (
                    (count(i),),
                    (C(f.name),),
                    (lost(f.time_lost_per_step_us),),
                    (pct(f.time_lost_frac),),
                    (T(sev(f)),),
                    (T(f.confidence),),
                )
            )
            for i, f in active
        ),
        (0, 2, 3),
    )
    return Section(
        "findings",
        ("Findings, ranked by time lost weighted by confidence",),
        (summary,) + tuple(_finding(i, f) for i, f in active),
    )


def _finding(i: int, f) -> Sub:
    s = sev(f)
    blocks: list = [
        Para((T(f.title),), kind="strong"),
        Para(
            (
                per_step(f.time_lost_per_step_us),
                ", ",
                pct(f.time_lost_frac),
                " of the window",
                " (upper bound)" if f.upper_bound else "",
                "; severity ",
                T(s),
                ", confidence ",
                T(f.confidence),
            ),
            True,
        ),
    ]
    if f.evidence:
        blocks.append(Evidence(tuple(((T(e.label),), (T(evidence_value(e)),), (T(e.window),)) for e in f.evidence)))
    if f.fix:
        blocks.append(Para((T(f.fix),), kind="fix"))
    if f.events:
        rows = tuple(Row(((C(ev.name),), (ms(ev.ts_us),), (ms(ev.dur_us),), (T(ev.track),))) for ev in f.events)
        blocks.append(Table(("example event (search it in Perfetto)", "at", "duration", "track"), rows, (1, 2)))
    blocks.append(
        Para(
            (
                "In a trace written by traceinspect annotate: the track ",
                C(f"{i}. {f.name} ({f.code})"),
                " of the ",
                C("traceinspect"),
                " process; search ",
                C(f.name),
                " for its slices.",
            ),
            True,
        )
    )
    return Sub(f"finding-{i}", (count(i), ". ", C(f.name), " (", T(f.code), ")"), tuple(blocks), badge=s)


def environment(report) -> Section:
    """What was analysed and how it was captured: the file, the GPU, the versions and profiler settings."""
    t, st = report.trace, report.steps
    g = known(t.gpu) or NO_GPU
    rows = [
        ("file", known(t.file)),
        ("file size", _bytes(known(t.file_bytes))),
        ("events", known(t.events)),
        ("GPU", g.name or None),  # NO_GPU: no row
        ("architecture", g.arch),
        ("compute capability", g.compute_capability),
        ("SMs", g.num_sms),
        ("GPU memory", _bytes(g.memory_bytes)),
        ("GPUs in trace", known(t.gpu_count_in_trace)),
        ("rank", f"{known(t.rank)} (from {known(t.rank_source)})"),
        ("world size", known(t.world_size)),
        ("steps", f"{known(st.count, 0)} from {known(st.source)}"),
        ("framework", known(t.framework)),
    ]
    rows += [(f"version: {k}", val) for k, val in sorted((known(t.versions) or {}).items())]
    src = known(t.profiler_source) or {}
    rows += [
        (
            f"profiler: {k}",
            "unknown" if val is None else f"{val} ({src[k]})" if str(src.get(k, "metadata")) != "metadata" else val,
        )
        for k, val in sorted((known(t.profiler) or {}).items())
    ]
    rows += [(f"setting: {k}", val) for k, val in (report.settings or {}).items()]  # non-default only
    rows += [(f"framework: {k}", val) for k, val in sorted((known(t.run_framework) or {}).items())]
    if known(t.lost_bytes) or known(t.dropped_events):
        rows.append(("truncated file", f"{_bytes(known(t.lost_bytes))} lost, {known(t.dropped_events)} events dropped"))
    kv = tuple(((T(k),), (T(val),)) for k, val in rows if val is not None)
    return Section("environment", ("Environment",), (KeyValue(kv),), collapsed=True)


def _bytes(n) -> str | None:
    if n is None:
        return None
    n = num(n)
    if n is None:
        return "n/a"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return None


PAGE = (
    "verdict",
    "cross_rank",
    "breakdown",
    "timeline",
    "account",
    "quality",
    "findings",
    "next_bottlenecks",
    "top_kernels",
    "efficiency",
    "memory",
    "run_config",
    "ranks",
    "failures",
    "warnings",
    "skipped",
    "environment",
)  # a report's sections, in the order every format prints them


def page(report) -> list[Section]:
    return sections(report, PAGE)


def sections(report, names) -> list[Section]:
    """The named sections that this report has, in that order."""
    return [s for s in (BUILDERS[n](report) for n in names) if s is not None]


BUILDERS = {
    "verdict": verdict,
    "breakdown": breakdown,
    "timeline": timeline,
    "findings": findings,
    "environment": environment,
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
