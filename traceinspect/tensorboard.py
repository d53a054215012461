"""TensorBoard export: the report as a text summary and its key numbers as scalars, in one event file.

Uses tensorboard's own event writer and protos (no TensorFlow, no torch). tensorboard is the optional
extra `traceinspect[tensorboard]`; it is imported only here, only when --tensorboard is given.
"""
from __future__ import annotations

import time
from pathlib import Path

from .errors import UsageError

PREFIX = "traceinspect"
INSTALL_HINT = "--tensorboard needs the optional extra: pip install 'traceinspect[tensorboard]'"


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
        raise UsageError(INSTALL_HINT) from None
    try:
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--tensorboard {logdir}: cannot create the directory: {e.strerror or e}") from None

    scalar_md = scalar_meta.create_summary_metadata(display_name="", description="")

    def scalar(tag: str, value: float) -> "summary_pb2.Summary.Value":
        return summary_pb2.Summary.Value(tag=f"{PREFIX}/{tag}", simple_value=float(value), metadata=scalar_md)

    def text(tag: str, value: str) -> "summary_pb2.Summary.Value":
        tensor = TensorProto(dtype=7,  # DT_STRING
                             string_val=[value.encode("utf-8")],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        return summary_pb2.Summary.Value(tag=f"{PREFIX}/{tag}", tensor=tensor,
                                         metadata=text_meta.create_summary_metadata(display_name=tag,
                                                                                    description=""))

    events: list[tuple[int, list]] = []
    rows = report.steps.get("per_step", [])
    for r in rows:
        vals = [scalar("step_time_ms", r["dur_us"] / 1e3)]
        vals += [scalar(f"breakdown_ms/{p}", us / 1e3) for p, us in sorted((r.get("breakdown_us") or {}).items())]
        events.append((int(r["step"]), vals))
    last = int(rows[-1]["step"]) if rows else 0
    summary = []
    if report.steps.get("count"):
        summary.append(scalar("median_step_time_ms", report.steps["median_us"] / 1e3))
    busy = (report.breakdown.get("gpu_busy") or {}).get("frac")
    if busy is not None:
        summary.append(scalar("gpu_busy_pct", 100.0 * busy))
    if report.verdict.get("expected_step_us") is not None:
        summary.append(scalar("expected_step_time_ms", report.verdict["expected_step_us"] / 1e3))
    lost: dict[str, float] = {}
    for f in report.findings:
        lost[f.name] = lost.get(f.name, 0.0) + f.time_lost_per_step_us
    summary += [scalar(f"time_lost_ms_per_step/{name}", us / 1e3) for name, us in sorted(lost.items())]
    v = report.verdict
    summary.append(text("verdict", v.get("top_title") or v.get("headline") or "no steps analysed"))
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

    Kept here rather than reusing render.markdown: this module sits below the renderers (layering).
    """
    t, st, v, bd = report.trace, report.steps, report.verdict, report.breakdown
    gpu = (t.get("gpu") or {}).get("name") or "no GPU activity"
    line = f"{gpu}, rank {t.get('rank', 0)}; {t.get('window', '')}"
    if st.get("count"):
        line += f"; median step **{st['median_us'] / 1e3:.1f} ms** over {st['count']} steps"
    o = [f"## traceinspect: {_md(t.get('file', '?'))}", "", _md(line), ""]
    if v.get("top"):
        o += [f"**Verdict:** {_md(v['top_title'])}", "",
              f"Expected step if fixed: about {v['expected_step_us'] / 1e3:.1f} ms "
              f"(fixing {', '.join(v.get('expected_from', []))}).", ""]
    elif v:
        o += [f"**Verdict:** {_md(v.get('headline', ''))}", ""]
    if bd:
        o += ["| where each step goes | ms per step | share |", "|---|---:|---:|"]
        o += [f"| {_md(b.get('label', p))} | {b['per_step_us'] / 1e3:.2f} | {100 * b['frac']:.1f}% |"
              for p, b in bd.items() if b.get("us")]
        o.append("")
    for i, f in enumerate(report.findings, 1):
        o.append(f"{i}. `{f.name}` ({f.code}): {f.time_lost_per_step_us / 1e3:.1f} ms/step, "
                 f"{100 * f.time_lost_frac:.1f}% of the window. {_md(f.title)}. Fix: {_md(f.fix)}")
    if not report.findings:
        o.append("No findings.")
    return "\n".join(o) + "\n"


def _md(s) -> str:
    """Text from the trace inside Markdown: pipes and angle brackets escaped (TensorBoard sanitises HTML too)."""
    return str(s).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
