"""Replay against subtraction for each fix with a replay transformation, on every shared trace where its
detector fires (the tables of docs/whatif.md).

    python bench/whatif_fixes.py [--shared DIR] [--fix NAME[,NAME...]]
    python bench/whatif_fixes.py --fix cpu-offload,pageable-memcpy,exposed-communication,allocator-churn
    python bench/whatif_fixes.py --fix eager-attention,padding-waste,launch-bound,unfused-optimizer

For each (trace, fix): the measured median step, the replay of no fix (engine.predict with no fix: the
identity replay held at the GPU-work floor, which is above the measured step where the host runs ahead
of the GPU), the replay of that fix alone (a plain name: the variant its fix text recommends;
launch-bound also with each variant), the subtraction it replaces (median step minus the finding's time
lost per step, capped as the verdict caps it: projected_step), and the transformation's own statement.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    from traceinspect.analyze import analyze
    from traceinspect.detectors.base import projected_step
    from traceinspect.trace.model import load_trace
    from traceinspect.whatif import engine as E

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "traces"))
    ap.add_argument("--fix", default="", help="comma-separated fix names (default: every transformation)")
    a = ap.parse_args()
    fixes = tuple(n for n in a.fix.split(",") if n) or tuple(sorted(E.transforms()))
    root = Path(a.shared)
    print("| trace | fix | measured ms | replay, no fix ms | replay ms | subtraction ms | transformation |")
    print("|---|---|---|---|---|---|---|")
    for p in sorted(root.rglob("*")):
        if not p.name.endswith((".json", ".json.gz")) or p.name == "EXPECTED.json":
            continue
        try:
            tr = load_trace(str(p))
        except Exception:  # a trace the tool refuses has no row (bench only; analyze reports the error)
            continue
        if not tr.has_gpu or not len(tr.steps):
            continue
        rep = analyze(tr)
        med = float(tr.steps["dur_us"].median())
        base = E.predict(tr, rep.findings, (), with_path=False).median_us
        for f in rep.findings:
            if f.name not in fixes:
                continue
            names = [f.name] + ([f"{f.name}:cuda-graphs", f"{f.name}:batch"] if f.name == "launch-bound" else [])
            sub = projected_step(med, f.time_lost_per_step_us)
            for n in names:
                pr = E.predict(tr, rep.findings, (n,), with_path=False)
                model = pr.models.get(n, "").replace("|", "/")
                print(
                    f"| `{p.relative_to(root)}` | {n} | {med / 1e3:.2f} | "
                    f"{base / 1e3:.2f} | {pr.median_us / 1e3:.2f} | {sub / 1e3:.2f} | {model} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
