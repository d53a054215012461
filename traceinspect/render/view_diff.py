"""The view of a ReportDiff (traceinspect diff): its sections as the typed blocks of render/view.py, built
once and printed by text, Markdown and HTML like a report's. File names, labels, titles, reasons and
environment values come from the two reports: untrusted, carried as T or C."""

from __future__ import annotations

from .common import count, ms, num
from .view import C, Chart, codes, Figures, Header, Item, Items, Para, Row, Section, T, Table


class Up(str):
    """Our words for a change for the worse (a new finding, a longer time): HTML colours it."""

    __slots__ = ()


class Down(Up):
    """... and for the better."""

    __slots__ = ()


def header(d) -> Header:
    return Header(
        (T(d.before.file), " -> ", T(d.after.file)),
        (("before: ", T(d.before.window), "; after: ", T(d.after.window)),),
    )


def verdict_line(d) -> str:
    """'Median step 176.3 ms -> 126.5 ms: 1.39x faster (-28.2%); beyond step-to-step noise (...)': numbers
    and our words only."""
    b, a = d.step_time_us.before, d.step_time_us.after
    if not d.speedup:
        return f"Median step {ms(b)} -> {ms(a)}"
    word = "faster" if a < b else "slower" if a > b else "the same"
    noise = ""
    if d.significant is not None:
        noise = (
            f"; {'beyond' if d.significant else 'within'} step-to-step noise "
            f"(+/-{ms(d.noise_us)}, 2x the combined standard error of the medians)"
        )
    return f"Median step {ms(b)} -> {ms(a)}: {d.speedup:.2f}x {word} ({d.change_pct:+.1f}%){noise}"


def page(d) -> list[Section]:
    return [
        s
        for s in (_verdict(d), _environment(d), _warnings(d), _steps(d), _breakdown(d), _findings(d), _kernels(d))
        if s
    ]


def _verdict(d) -> Section:
    faster = d.step_time_us.after < d.step_time_us.before
    figures = (
        (("change",), ("n/a" if d.change_pct is None else f"{d.change_pct:+.1f}%",)),
        (("noise (2 SE)",), (ms(d.noise_us) if d.noise_us is not None else "n/a",)),
        (("resolved",), (count(len(d.resolved)),)),
        (("new",), (count(len(d.new)),)),
        (("persisting",), (count(len(d.persisting)),)),
    )
    blocks = [Para((verdict_line(d),), kind="lead"), Figures(figures)]
    if d.prediction:
        pr = d.prediction
        blocks.append(
            Para(
                ("Predicted for fixing ",)
                + codes(pr.fixes)
                + (
                    " (replay of the before trace): ",
                    ms(pr.predicted_us),
                    "; measured ",
                    ms(pr.measured_us),
                    "; error ",
                    _signed_pct(pr.error_frac),
                )
            )
        )
    return Section("verdict", (), tuple(blocks), cls="verdict ok" if faster else "verdict")


def _environment(d) -> Section | None:
    if not d.environment:
        return None
    rows = tuple(Row(((T(e.field),), (T(e.before),), (T(e.after),), (T(e.why),))) for e in d.environment)
    return Section(
        "environment",
        ("Why the comparison may be unfair",),
        (Table(("what", "before", "after", "why it matters"), rows),),
    )


def _warnings(d) -> Section | None:
    if not d.warnings:
        return None
    return Section("warnings", ("Warnings",), (Items(tuple(Item((T(w),)) for w in d.warnings)),))


def _steps(d) -> Section:
    rows = tuple(
        Row(
            (
                (name,),
                (count(s.n),),
                (ms(s.median_us),),
                (ms(s.mean_us),),
                (ms(s.std_us),),
                (ms(s.min_us),),
                (ms(s.max_us),),
            )
        )
        for name, s in (("before", d.before.steps), ("after", d.after.steps))
    )
    head = ("", "steps", "median", "mean", "std", "min", "max")
    return Section("steps", ("Step time",), (Table(head, rows, (1, 2, 3, 4, 5, 6)),))


def _breakdown(d) -> Section | None:
    from . import charts

    if not d.breakdown:
        return None
    rows = tuple(
        Row(((T(r.label),), (ms(r.before_us),), (ms(r.after_us),), (_signed(r.delta_us),)), color=r.part)
        for r in d.breakdown
        if r.before_us or r.after_us or r.part == "compute"
    )
    return Section(
        "breakdown",
        ("Breakdown per step (mean)",),
        (
            Chart("chart-diff", lambda: charts.diff_breakdown(d)),
            Table(("part", "before", "after", "change"), rows, (1, 2, 3)),
        ),
    )


def _findings(d) -> Section:
    rows = [
        Row(((C(f.name), " ", T(f.title)), (Down("resolved"),), (ms(f.time_lost_per_step_us),), ("-",)))
        for f in d.resolved_findings
    ]
    rows += [
        Row(((C(f.name), " ", T(f.title)), (Up("new"),), ("-",), (ms(f.time_lost_per_step_us),)))
        for f in d.new_findings
    ]
    rows += [
        Row(
            (
                (C(f.name), " ", T(f.title_after)),
                ("persisting",),
                (ms(f.time_lost_per_step_us_before),),
                (ms(f.time_lost_per_step_us_after),),
            )
        )
        for f in d.persisting
    ]
    rows += [Row(((C(f.name),), ("not checked ", T(f.side), ": ", T(f.reason)), (), ())) for f in d.unchecked]
    if not rows:
        return Section("findings", ("Findings",), (Para(("None on either side.",)),))
    head = ("finding", "status", "lost per step before", "after")
    return Section("findings", ("Findings",), (Table(head, tuple(rows), (2, 3), narrow=(1, 2, 3, 0)),))


def _kernels(d) -> Section | None:
    if not d.kernels:
        return None
    rows = tuple(
        Row(
            ((C(k.name),), (_opt(k.before_us_per_step),), (_opt(k.after_us_per_step),), (_signed(k.delta_us_per_step),))
        )
        for k in d.kernels
    )
    return Section(
        "kernels",
        ("Kernels that moved the most",),
        (
            Table(("kernel", "before /step", "after /step", "change"), rows, (1, 2, 3), narrow=(1, 2, 3, 0)),
            Para(("-: not among that report's top kernels.",), True),
        ),
        collapsed=True,
    )


def _signed_pct(x) -> str:
    """A signed percentage from a fraction (numbers only; 'n/a' for anything else)."""
    return f"{100 * x:+.1f}%" if isinstance(x, (int, float)) and not isinstance(x, bool) else "n/a"


def _signed(us) -> str:
    v = num(us)
    if v is None:
        return "-"
    s = ("+" if v > 0 else "") + ms(v)
    return Up(s) if v > 0 else Down(s) if v < 0 else s


def _opt(us) -> str:
    return "-" if num(us) is None else ms(us)
