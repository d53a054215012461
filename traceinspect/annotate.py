"""Findings drawn into the trace: the original Chrome-trace JSON with a "traceinspect" process added.

Owns the annotation events (one track per finding, slices over the intervals it claims; one instant marker
per step with its breakdown) and splicing them into the original bytes, which stay untouched. Must not
render reports or change what the analyzer reads: the added events carry a category no reader classifies.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import msgspec

from . import detectors as registry
from .detectors.base import Context
from .errors import TraceError
from .findings import numbered
from .trace.load import read_bytes
from .trace.timeline import PARTS

CATEGORY = "traceinspect"
PROCESS = "traceinspect"
# an unescaped `"traceEvents"` followed by `:` and `[` is a key whose value is an array (see _splice_point)
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def annotation_events(trace, report) -> list[dict]:
    """The events to add, as Chrome-trace dicts on the file's clock (microseconds, absolute).

    Track 0 holds one instant marker per analysed step; track i holds finding i (findings.numbered, the
    report's own numbering): slices over the exact
    intervals it claims (_claimed), each with the part of the time lost it carries, or, for a finding that
    claims no intervals, its exemplar events, marked as such.
    """
    origin = float(trace.tables.origin_us)
    pid = _free_pid(trace)
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": PROCESS}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "steps"}},
    ]
    per = trace.timeline.per_step
    for row in per.itertuples(index=False):
        parts = {p: round(float(getattr(row, f"{p}_us")), 3) for p in PARTS}
        ev.append(
            {
                "ph": "i",
                "s": "t",
                "cat": CATEGORY,
                "name": f"step {int(row.step)}: {float(row.dur_us) / 1e3:.1f} ms",
                "pid": pid,
                "tid": 0,
                "ts": _ts(origin, row.start_us),
                "args": {"step": int(row.step), "dur_us": round(float(row.dur_us), 3), "breakdown_us": parts},
            }
        )
    ctx = Context.of(trace)
    for i, f in numbered(report.findings):
        ev.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": i, "args": {"name": f"{i}. {f.name} ({f.code})"}}
        )
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": i, "args": {"sort_index": i}})
        common = {
            "finding": f.name,
            "code": f.code,
            "title": f.title,
            "finding_time_lost_us": round(f.time_lost_us, 3),
            "fix": f.fix,
        }
        slices = _claimed(trace, ctx, f)
        for a, b, lost, what in slices:
            ev.append(
                {
                    "ph": "X",
                    "cat": CATEGORY,
                    "name": f.name,
                    "pid": pid,
                    "tid": i,
                    "ts": _ts(origin, a),
                    "dur": round(b - a, 3),
                    "args": {**common, "what": what, "time_lost_us": lost},
                }
            )
        if not slices:
            for e in f.events:
                ev.append(
                    {
                        "ph": "X",
                        "cat": CATEGORY,
                        "name": f.name,
                        "pid": pid,
                        "tid": i,
                        "ts": _ts(origin, e.ts_us),
                        "dur": round(e.dur_us, 3),
                        "args": {
                            **common,
                            "what": f"example event {e.name} on {e.track} (this finding does "
                            "not itemise its intervals)",
                        },
                    }
                )
    return ev


def _claimed(trace, ctx, f) -> list[tuple[float, float, float, str]]:
    """(start, end, time lost, what) of every interval a finding claims: the GPU idle it claims per timeline
    part (Finding.claim_sets, the sets the explained-time account adds up, each with the share of it
    claimed), and the GPU work its detector itemises (Detector.claims: the kernels a fix would speed up)."""
    out = []
    for part, (s, e, factor) in sorted((getattr(f, "claim_sets", None) or {}).items()):
        what = f"GPU {part.replace('_', ': ', 1)} claimed by this finding" + (
            f" ({100 * factor:.0f}% of it)" if factor < 1 - 1e-9 else ""
        )
        out += [(a, b, (b - a) * factor, what) for a, b in zip(s.tolist(), e.tolist())]
    cls = registry.BY_KEY.get(f.name)
    claim = cls().claims(trace, ctx, f) if cls is not None else None
    if claim is not None:
        out += list(
            zip(
                claim.start_us.tolist(),
                claim.end_us.tolist(),
                claim.lost_us.tolist(),
                [claim.what] * claim.start_us.size,
            )
        )
    return sorted(out)


def annotate_file(src: str, out: str, trace, report) -> int:
    """Write src with the annotation events added to out (gzip when out ends in .gz); returns their count.

    The original bytes are kept: the new events are spliced in right after the opening bracket of the
    top-level traceEvents array (or of a top-level array). Where that point is ambiguous the document is
    decoded and written again: every original event is kept, as values rather than bytes.
    """
    warnings: list[str] = []
    data, _ = read_bytes(Path(src), warnings)
    if warnings:
        raise TraceError(
            src,
            f"cannot annotate a damaged trace ({warnings[0]})",
            hint="annotate a complete trace; 'analyze' still reads what this one holds",
        )
    # validate the whole document without building its events: top-level values stay raw JSON bytes
    shape = list[msgspec.Raw] if data.lstrip()[:1] == b"[" else dict[str, msgspec.Raw]
    try:
        doc = msgspec.json.decode(data, type=shape)
    except msgspec.DecodeError as e:
        raise TraceError(
            src,
            f"cannot annotate a trace that is not complete JSON ({e})",
            hint="annotate a complete trace; 'analyze' still reads what this one holds",
        ) from None
    if isinstance(doc, dict) and not bytes(doc.get("traceEvents", b"")).lstrip().startswith(b"["):
        raise TraceError(
            src,
            "cannot annotate: not a Chrome trace (no traceEvents array)",
            hint="pass the .pt.trace.json[.gz] file torch.profiler wrote",
        )
    extra = annotation_events(trace, report)
    blob = _encode(extra)
    at = _splice_point(data, doc)
    if at is not None:
        rest = data[at:].lstrip()
        sep = b"" if rest.startswith(b"]") else b","
        body = data[:at] + b"\n" + blob[1:-1] + sep + data[at:]
    else:
        doc = msgspec.json.decode(data)  # only here, where the splice point is ambiguous
        if isinstance(doc, list):
            doc = extra + doc
        else:
            doc["traceEvents"] = extra + list(doc["traceEvents"])
        body = _encode(doc)
    from .safeio import write_atomic

    write_atomic(out, gzip.compress(body, compresslevel=6) if out.endswith(".gz") else body)
    return len(extra)


def _splice_point(data: bytes, doc) -> int | None:
    """The offset just after the `[` that opens the top-level event array, or None if unsure.

    In valid JSON an unescaped `"` always delimits a string, so an unescaped `"traceEvents"` followed by
    `:` is a key; it is the top-level one when it is the only such key and its array is the top-level value.
    """
    head = data.lstrip()
    if head.startswith(b"["):
        return len(data) - len(head) + 1
    hits = [m for m in _KEY.finditer(data) if _unescaped(data, m.start())]
    if len(hits) != 1:
        return None
    if not isinstance(doc, dict):
        return None
    # and it is the top-level one: its array is byte for byte the top-level traceEvents value (a key spelled
    # with escapes, "trace\u0045vents", would leave a nested one as the only textual match)
    raw = bytes(doc["traceEvents"])
    at = hits[0].end() - 1
    return hits[0].end() if data[at : at + len(raw)] == raw else None


def _unescaped(data: bytes, i: int) -> bool:
    n = 0
    while i - n - 1 >= 0 and data[i - n - 1] == 0x5C:  # backslash
        n += 1
    return n % 2 == 0


def _encode(obj) -> bytes:
    # ASCII only, and no raw <, >, & (trace names are untrusted; the file may end up inside an HTML page)
    s = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), default=_default)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode("ascii")


def _default(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _ts(origin: float, rel_us) -> float:
    return round(origin + float(rel_us), 3)


def _free_pid(trace) -> int:
    """A pid no process of the trace uses: above Linux's pid_max (4194304), and above any pid the tables hold."""
    used = [
        int(t["pid"].max())
        for t in (trace.kernels, trace.cpu_ops, trace.runtime)
        if len(t) and "pid" in t.columns and t["pid"].dtype.kind in "iu"
    ]
    return max([1 << 30] + [u + 1 for u in used])
