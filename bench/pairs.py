"""Predicted against measured on every real before/after pair in ../shared/traces (issue 26).

    python bench/pairs.py                      # the table, Markdown, about 1 min
    python bench/pairs.py --traces DIR         # another traces folder laid out like ../shared/traces

A pair is two captures of the same job before and after a change. For each, `traceinspect diff`'s
prediction is printed: the before-report's replay of fixing exactly the findings the after run no
longer has ("resolved"), against the after run's measured median step. Pairs where diff resolves no
finding with a replay transformation print "no prediction" and why, so nothing is left out silently.

The pairs: EXPECTED.json's "pairs" (the kineto ResNet-50 num_workers 0 -> 4 captures), every other
combination of the three captures on each side of that pair (the same job, captured again), and the
other before/after captures the shared folder holds (kineto docs before_fix/after_fix, HTA
trace_diff control/test). The fix the after run made is read from the reports (resolved findings),
not stated here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KINETO = "pytorch__kineto/tb_plugin/samples"
OTHER = [
    ("pytorch__kineto/docs/traces/before_fix_trace.json", "pytorch__kineto/docs/traces/after_fix_trace.json"),
    (
        "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
        "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz",
    ),
]


def pairs(root: Path) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    exp = root / "EXPECTED.json"
    if exp.exists():
        out += [(p["before"], p["after"]) for p in json.loads(exp.read_text()).get("pairs", [])]
    side = [
        sorted(str(p.relative_to(root)) for p in (root / KINETO / f"resnet50_num_workers_{n}").glob("*.json.gz"))
        for n in (0, 4)
    ]
    out += [p for p in itertools.product(*side) if p not in out]
    out += [p for p in OTHER if p not in out]
    return [p for p in out if (root / p[0]).exists() and (root / p[1]).exists()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=str(REPO.parent / "shared" / "traces"))
    a = ap.parse_args()
    root = Path(a.traces)
    from traceinspect.analyze import analyze
    from traceinspect.diff import diff
    from traceinspect.trace.model import load_trace

    reports: dict = {}

    def rep(p: str):
        if p not in reports:
            reports[p] = analyze(load_trace(str(root / p)))
        return reports[p]

    print("| before | after | fixes (resolved) | measured before, ms | predicted, ms | measured after, ms | error |")
    print("|---|---|---|---|---|---|---|")
    errs = []
    for b, af in pairs(root):
        d = diff(rep(b), rep(af))
        pr = d.prediction
        mb = rep(b).steps.median_us / 1e3
        if pr is None:
            gone = ", ".join(d.resolved) or "none"
            print(
                f"| `{b}` | `{af}` | no prediction (resolved: {gone}) | {mb:.2f} | | {rep(af).steps.median_us / 1e3:.2f} | |"
            )
            continue
        errs.append(pr.error_frac)
        print(
            f"| `{b}` | `{af}` | {', '.join(pr.fixes)} | {mb:.2f} | {pr.predicted_us / 1e3:.2f} | "
            f"{pr.measured_us / 1e3:.2f} | {100 * pr.error_frac:+.1f}% |",
            flush=True,
        )
    if errs:
        s = sorted(errs)
        print(
            f"\n{len(s)} predictions: error {100 * s[0]:+.1f}% to {100 * s[-1]:+.1f}%, median {100 * s[len(s) // 2]:+.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
