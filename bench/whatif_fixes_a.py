"""Replay against subtraction for the eager-attention, padding-waste, launch-bound and unfused-optimizer
fixes on every shared trace where the detector fires (docs/whatif.md, "Measured on the shared traces").

    python bench/whatif_fixes_a.py                      # ../shared/traces
    python bench/whatif_fixes_a.py --shared DIR

Per trace and fix: the measured median step, the replay of that fix alone (a plain name: the variant its
fix text recommends; launch-bound also with each variant), and subtraction (the median step minus the
finding's time lost per step, the 90% cap of projected_step). Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXES = ("eager-attention", "padding-waste", "launch-bound", "unfused-optimizer")


def main() -> int:
    from traceinspect.analyze import analyze
    from traceinspect.detectors.base import projected_step
    from traceinspect.trace.model import load_trace
    from traceinspect.whatif import engine as E
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "traces"))
    a = ap.parse_args()
    root = Path(a.shared)
    print("| trace | fix | measured ms | replay ms | subtraction ms | replay model |")
    print("|---|---|---|---|---|---|")
    for p in sorted(root.rglob("*")):
        if not p.name.endswith((".json", ".json.gz")) or p.name == "EXPECTED.json":
            continue
        try:
            tr = load_trace(str(p))
        except Exception:
            continue
        if not tr.has_gpu or not len(tr.steps):
            continue
        rep = analyze(tr)
        med = float(tr.steps["dur_us"].median())
        for f in rep.findings:
            if f.name not in FIXES:
                continue
            names = [f.name] + ([f"{f.name}:cuda-graphs", f"{f.name}:batch"] if f.name == "launch-bound" else [])
            sub = projected_step(med, f.time_lost_per_step_us)
            for n in names:
                pr = E.predict(tr, rep.findings, (n,), with_path=False)
                print(f"| {p.relative_to(root)} | {n}{' (masked)' if f.masked_by else ''} | {med / 1e3:.2f} | "
                      f"{pr.median_us / 1e3:.2f} | {sub / 1e3:.2f} | {pr.models.get(n, '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
