"""TensorBoard export: the report as a text summary and its key numbers as scalars, in one event file.

Uses tensorboard's own event writer and protos (no TensorFlow, no torch). tensorboard is the optional
extra `traceinspect[tensorboard]`; it is imported only here, only when --tensorboard is given.
"""

from __future__ import annotations

import time
from pathlib import Path

from .errors import UsageError
from .inert import md_code, md_text, num
from .inert import text as inert_text
from .report import known

PREFIX = "traceinspect"
INSTALL_HINT = "needs the optional extra: pip install -e '.[tensorboard]' in the traceinspect checkout"


def write_report(report, logdir) -> str:
    """Write one event file into logdir and return its path.

    Scalars, per analysed step (global step = the ProfilerStep number): step_time_ms and
    breakdown_ms/<part>. Once, at the last analysed step: median_step_time_ms, gpu_busy_pct,
    expected_step_time_ms and time_lost_ms_per_step/<finding>. Text: verdict, and report (a short
    Markdown summary: TensorBoard's text panel, not a replacement for the full report).
    """
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.scalar import metadata as scalar_meta
        from tensorboard.plugins.text import metadata as text_meta
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise UsageError(INSTALL_HINT, param="logdir", value=str(logdir)) from None
    try:
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f": cannot create the directory: {e.strerror or e}", param="logdir", value=str(logdir)
        ) from None

    scalar_md = scalar_meta.create_summary_metadata(display_name="", description="")

    def scalar(tag: str, value: float) -> "summary_pb2.Summary.Value":
        return summary_pb2.Summary.Value(tag=f"{PREFIX}/{tag}", simple_value=float(value), metadata=scalar_md)

    def text(tag: str, value: str) -> "summary_pb2.Summary.Value":
        tensor = TensorProto(
            dtype=7,  # DT_STRING
            string_val=[value.encode("utf-8")],
            tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
        )
        return summary_pb2.Summary.Value(
            tag=f"{PREFIX}/{tag}",
            tensor=tensor,
            metadata=text_meta.create_summary_metadata(display_name=tag, description=""),
        )

    # a saved or cached report is typed on read (Report.from_dict), but a number may still be NaN: left out
    events: list[tuple[int, list]] = []
    for r in known(report.steps.per_step, []):
        vals = [scalar("step_time_ms", num(r.dur_us) / 1e3)] if num(r.dur_us) is not None else []
        bd_us = known(r.breakdown_us, {})
        vals += [
            scalar(f"breakdown_ms/{inert_text(p)}", num(us) / 1e3)
            for p, us in sorted(bd_us.items())
            if num(us) is not None
        ]
        events.append((int(num(r.step)), vals))
    last = events[-1][0] if events else 0
    summary = []
    if report.steps.count and num(known(report.steps.median_us)) is not None:
        summary.append(scalar("median_step_time_ms", num(report.steps.median_us) / 1e3))
    part = report.breakdown.get("gpu_busy")
    busy = num(part.frac) if part else None
    if busy is not None:
        summary.append(scalar("gpu_busy_pct", 100.0 * busy))
    if num(report.verdict.expected_step_us) is not None:
        summary.append(scalar("expected_step_time_ms", num(report.verdict.expected_step_us) / 1e3))
    lost: dict[str, float] = {}
    for f in report.findings:
        lost[inert_text(f.name)] = lost.get(inert_text(f.name), 0.0) + (num(f.time_lost_per_step_us) or 0.0)
    summary += [scalar(f"time_lost_ms_per_step/{name}", us / 1e3) for name, us in sorted(lost.items())]
    v = report.verdict
    # TensorBoard renders every text summary as Markdown: the verdict too
    summary.append(text("verdict", md_text(known(v.top_title) or known(v.headline) or "no steps analysed")))
    summary.append(text("report", summary_markdown(report)))
    events.append((last, summary))

    writer = EventFileWriter(str(logdir), filename_suffix=".traceinspect")
    try:
        now = time.time()
        for step, vals in events:
            writer.add_event(event_pb2.Event(wall_time=now, step=step, summary=summary_pb2.Summary(value=vals)))
        writer.flush()
        # the writer names the file (time, host, pid); `_file_name` is the only place it says which
        return str(getattr(writer, "_file_name", logdir))
    finally:
        writer.close()


def summary_markdown(report) -> str:
    """Verdict, breakdown and findings as Markdown for TensorBoard's text panel (which renders Markdown).

    Kept here rather than reusing render.markdown: this module sits below the renderers (layering). Every
    value goes through inert.md_text()/md_code() (safe under Python-Markdown, which TensorBoard uses,
    whose sanitiser keeps <img> and <a>) and numbers through _ms().
    """
    t, st, v, bd = report.trace, report.steps, report.verdict, report.breakdown
    g = known(t.gpu)
    line = f"{md_text(g.name if g else 'no GPU activity')}, rank {md_text(known(t.rank, 0))}; {md_text(known(t.window, ''))}"
    if st.count:
        line += f"; median step **{_ms(known(st.median_us))} ms** over {md_text(st.count)} steps"
    o = [f"## traceinspect: {md_text(known(t.file, '?'))}", "", line, ""]
    if known(v.top):
        o += [
            f"**Verdict:** {md_text(known(v.top_title, ''))}",
            "",
            f"Expected step if fixed: about {_ms(v.expected_step_us)} ms "
            f"(fixing {', '.join(md_code(n) for n in known(v.expected_from, []))}).",
            "",
        ]
    elif v:
        o += [f"**Verdict:** {md_text(known(v.headline, ''))}", ""]
    if bd:
        o += ["| where each step goes | ms per step | share |", "|---|---:|---:|"]
        o += [
            f"| {md_text(known(b.label, p))} | {_ms(known(b.per_step_us), 2)} | {_pct(known(b.frac))} |"
            for p, b in bd.items()
            if b.us
        ]
        o.append("")
    for i, f in enumerate(report.findings, 1):
        o.append(
            f"{md_text(i)}. {md_code(f.name)} ({md_text(f.code)}): {_ms(f.time_lost_per_step_us)} ms/step, "
            f"{_pct(f.time_lost_frac)} of the window. {md_text(f.title)}. Fix: {md_text(f.fix)}"
        )
    if not report.findings:
        o.append("No findings.")
    return "\n".join(o) + "\n"


def _ms(us, digits: int = 1) -> str:
    x = num(us)
    return "n/a" if x is None else f"{x / 1e3:.{digits}f}"


def _pct(frac) -> str:
    x = num(frac)
    return "n/a" if x is None else f"{100 * x:.1f}%"
