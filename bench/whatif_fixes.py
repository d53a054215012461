"""Replay against subtraction for the cpu-offload, pageable-memcpy, exposed-communication and
allocator-churn fixes, on every shared trace where one of those detectors fires.

    python bench/whatif_fixes.py [../shared/traces]

For each (trace, fix): the measured median step, the replay of no fix (engine.predict with no fix: the
identity replay held at the GPU-work floor, which is above the measured step where the host runs ahead
of the GPU), the replay of that fix alone (engine.predict), the
subtraction it replaces (median step minus the finding's time lost per step, capped as the verdict
caps it), and the transformation's own statement. Prints a Markdown table (docs/whatif.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXES = ("cpu-offload", "pageable-memcpy", "exposed-communication", "allocator-churn")


def main() -> int:
    from traceinspect.analyze import analyze
    from traceinspect.detectors.base import projected_step
    from traceinspect.trace.model import load_trace
    from traceinspect.whatif import engine as E
    root = Path(sys.argv[1] if len(sys.argv) > 1 else REPO.parent / "shared" / "traces")
    print("| trace | fix | measured ms | replay, no fix ms | replay ms | subtraction ms | transformation |")
    print("|---|---|---|---|---|---|---|")
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
        base = E.predict(tr, rep.findings, (), with_path=False).median_us
        for f in rep.findings:
            if f.name not in FIXES:
                continue
            pr = E.predict(tr, rep.findings, (f.name,), with_path=False)
            sub = projected_step(med, f.time_lost_per_step_us)
            model = pr.models.get(f.name, "").replace("|", "/")
            print(f"| `{p.relative_to(root)}` | {f.name}{' (masked)' if f.masked_by else ''} | {med / 1e3:.1f} | "
                  f"{base / 1e3:.1f} | {pr.median_us / 1e3:.1f} | {sub / 1e3:.1f} | {model} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
