"""What the what-if replay adds to `analyze` on a big trace, measured in the same run.

    python bench/whatif.py --size 1G        # the issue's target: replay <= 30% of analyze's time
    python bench/whatif.py --size 100M      # quick check

The trace comes from bench/generate.py (reused when it exists). One process: load the trace, run
analyze with the replay switched off (the verdict falls back to subtraction), then the replay work the
verdict does (graph build, identity replay, one replay per fix on the cumulative path and one per fix
alone) on the same loaded trace, twice: with the replay loop in C (traceinspect/trace/_scan.c) and with
the Python fallback (what runs without the extension; TRACEINSPECT_PURE_REPLAY=1 forces it anywhere).
Each run starts from the memo analyze left (graph build and event order included in both). Prints the
seconds of each and the ratio replay / (load + analyze) for both loops.

    python bench/whatif.py --size 1G --no-fallback   # the native run only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="100M")
    ap.add_argument("--out", default="/tmp/traceinspect-bench")
    ap.add_argument("--no-fallback", action="store_true", help="skip the run with the Python replay loop")
    a = ap.parse_args()
    subprocess.run(
        [sys.executable, str(REPO / "bench/generate.py"), "--size", a.size, "--out", a.out],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    path = max(Path(a.out).glob(f"*{a.size}*.json"), key=lambda p: p.stat().st_mtime)
    import importlib

    an = importlib.import_module("traceinspect.analyze")  # the module (the package exports the function)
    from traceinspect.verdict import fix_path
    from traceinspect.trace.model import load_trace
    from traceinspect.whatif import engine as E

    t0 = time.perf_counter()
    trace = load_trace(str(path))
    t1 = time.perf_counter()
    known = E.transforms
    E.transforms = lambda: {}  # analyze without the replay (subtraction verdict)
    try:
        rep = an.analyze(trace)
    finally:
        E.transforms = known
    t2 = time.perf_counter()
    fixable = list(rep.findings)[:3]
    median = float(trace.steps["dur_us"].median())
    after_analyze = dict(trace._memo)  # each replay run starts here: no graph, no order, no replay memoised
    from traceinspect.whatif import replay as R

    native = R._native() is not None

    def run(pure: bool) -> float:
        trace._memo.clear()
        trace._memo.update(after_analyze)
        old = os.environ.pop("TRACEINSPECT_PURE_REPLAY", None)
        if pure:
            os.environ["TRACEINSPECT_PURE_REPLAY"] = "1"
        try:
            s = time.perf_counter()
            fix_path(trace, rep.findings, fixable, median)
            return time.perf_counter() - s
        finally:
            os.environ.pop("TRACEINSPECT_PURE_REPLAY", None)
            if old is not None:
                os.environ["TRACEINSPECT_PURE_REPLAY"] = old

    base = t2 - t0
    t_main = run(pure=not native or os.environ.get("TRACEINSPECT_PURE_REPLAY") == "1")
    out = {
        "file": path.name,
        "bytes": path.stat().st_size,
        "events": trace.meta.n_events,
        "gpu_ops": int(len(trace.kernels) + len(trace.memcpy)),
        "runtime_calls": int(len(trace.runtime)),
        "load_s": round(t1 - t0, 2),
        "analyze_s": round(t2 - t1, 2),
        "replay_loop": "native" if R._native() is not None else "python",
        "replay_s": round(t_main, 2),
        "replay_over_load_plus_analyze": round(t_main / base, 3),
    }
    if native and not a.no_fallback and os.environ.get("TRACEINSPECT_PURE_REPLAY") != "1":
        t_py = run(pure=True)
        out.update(
            {
                "python_fallback_replay_s": round(t_py, 2),
                "python_fallback_over_load_plus_analyze": round(t_py / base, 3),
            }
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
