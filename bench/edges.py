"""Recorded and inferred edges of the replay graph on every trace under a folder, with the identity
replay error of each, grouped by whether the trace's cross-stream and sync edges were recorded.

    python bench/edges.py [--traces ../shared/traces]

One row per trace with analysed steps and GPU work: cross-stream edges recorded / inferred, host waits
recorded / inferred, cross-thread edges (always inferred), records the times contradict, and the identity
replay's median and max per-step error. The summary gives the identity error separately for traces
with recorded edges and for traces whose edges are all inferred (issue 26 item 1, docs/whatif.md "Edges").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(REPO.parent / "shared" / "traces"))
    a = ap.parse_args()
    from traceinspect.errors import TraceError
    from traceinspect.trace.model import load_trace
    from traceinspect.whatif.engine import graph_of, identity

    root = Path(a.traces)
    files = [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name != "EXPECTED.json"
    ]
    rows = []
    print(
        f"{'trace':70} {'xs rec':>6} {'xs inf':>6} {'hw rec':>6} {'hw inf':>6} {'xthr':>5} {'bad':>4} {'id med':>7} {'id max':>7}"
    )
    for p in files:
        try:
            t = load_trace(p)
        except TraceError:
            continue
        if not t.has_gpu or not len(t.steps):
            continue
        ident = identity(t)
        if not ident:
            continue
        e = graph_of(t).edges
        rows.append((e, ident))
        name = str(p.relative_to(root))
        name = name if len(name) <= 70 else "..." + name[-67:]
        print(
            f"{name:70} {e.cross_stream_recorded:>6} {e.cross_stream_inferred:>6} {e.host_wait_recorded:>6} "
            f"{e.host_wait_inferred:>6} {e.cross_thread_inferred:>5} {e.contradicted:>4} "
            f"{100 * ident['median_error_frac']:>6.2f}% {100 * ident['max_error_frac']:>6.2f}%"
        )
    rec = [(e, i) for e, i in rows if e.recorded]
    inf = [(e, i) for e, i in rows if not e.recorded]
    tot_r = sum(e.recorded for e, _ in rows)
    tot_i = sum(e.inferred for e, _ in rows)
    print()
    print(f"traces: {len(rows)}; with recorded edges: {len(rec)}; all edges inferred: {len(inf)}")
    if tot_r + tot_i:
        print(
            f"edges over all traces: {tot_r} recorded, {tot_i} inferred ({100 * tot_r / (tot_r + tot_i):.1f}% recorded)"
        )
    for label, grp in (("recorded", rec), ("inferred only", inf)):
        if grp:
            med = sorted(i["median_error_frac"] for _, i in grp)[len(grp) // 2]
            mx = max(i["max_error_frac"] for _, i in grp)
            print(f"identity error, traces with {label} edges: median of medians {100 * med:.2f}%, max {100 * mx:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
