"""Start-up cost and end-to-end analysis against the raw JSON decode (issue 12's targets).

Every number is the best of N fresh interpreter processes (wall seconds, `time.perf_counter` around
`subprocess.run`), so imports and interpreter start are included, as a user sees them:

  capture     `import torch` vs `import torch; import traceinspect.capture`, and the import timed
              inside a process that has imported torch (the precise number): what
              the capture helpers add to a training process (target: < 50 ms; and neither pandas nor
              the analyzer loaded, checked in the same process)
  help        `python -m traceinspect --help` (target: < 0.2 s), next to `python -c pass`
  analyze     `python -m traceinspect analyze FILE --no-cache -o /dev/null` vs, on the same file,
              `msgspec.json.decode(bytes)` (raw: untyped) and a typed decode with traceinspect's own
              Kineto structs (trace/load.py Document); target: analyze within 2x of the raw decode

Usage (from the repository root):

    python bench/generate.py --size 100M          # once: /tmp/traceinspect-bench/...json
    python bench/startup.py [--trace FILE] [--runs 5]

Without --trace it uses the newest 100 MB .json file bench/generate.py left in /tmp/traceinspect-bench.
Exit status 1 when a target is missed (so CI or a person sees it), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def best(code: list[str], runs: int) -> float:
    out = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(code, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out = min(out, time.perf_counter() - t)
    return out


def py(src: str) -> list[str]:
    return [sys.executable, "-c", src]


def has(module: str) -> bool:
    return subprocess.run(py(f"import {module}"), env=ENV, capture_output=True).returncode == 0


def default_trace() -> Path | None:
    d = Path("/tmp/traceinspect-bench")
    files = (
        sorted((p for p in d.glob("*.json") if 80e6 <= p.stat().st_size <= 130e6), key=lambda p: p.stat().st_mtime)
        if d.is_dir()
        else []
    )
    return files[-1] if files else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="a trace file of about 100 MB of JSON")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per measurement (best of)")
    args = ap.parse_args(argv)
    missed = []
    rows = []

    base = best(py("pass"), args.runs)
    rows.append(("python -c pass", base, ""))
    if has("torch"):
        torch = best(py("import torch"), args.runs)
        cap = best(py("import torch; import traceinspect.capture"), args.runs)
        probe = subprocess.run(
            py(
                "import sys, torch, traceinspect.capture; print(json.dumps(["
                "'pandas' in sys.modules, 'traceinspect.analyze' in sys.modules]))".replace(
                    "json.dumps", "__import__('json').dumps"
                )
            ),
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        )
        pandas, analyzer = json.loads(probe.stdout)
        # the same import timed inside the process, torch already loaded: free of process start noise
        inproc = min(
            float(
                subprocess.run(
                    py(
                        "import time, torch; t = time.perf_counter(); import traceinspect.capture; "
                        "print(time.perf_counter() - t)"
                    ),
                    env=ENV,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(args.runs)
        )
        rows += [
            ("import torch", torch, ""),
            (
                "import torch; import traceinspect.capture",
                cap,
                f"+{1e3 * (cap - torch):.0f} ms over torch (target < 50 ms); pandas loaded: {pandas}, "
                f"analyzer loaded: {analyzer}",
            ),
            ("  in-process, after import torch", inproc, f"{1e3 * inproc:.1f} ms (target < 50 ms)"),
        ]
        if inproc >= 0.050 or pandas or analyzer:
            missed.append("capture import")
    else:
        rows.append(
            (
                "import traceinspect.capture",
                best(py("import traceinspect.capture"), args.runs),
                "torch not installed: no torch baseline",
            )
        )
    helps = best([sys.executable, "-m", "traceinspect", "--help"], args.runs)
    rows.append(("python -m traceinspect --help", helps, "target < 0.2 s"))
    if helps >= 0.2:
        missed.append("--help")
    import shutil

    script = shutil.which("traceinspect")
    if script:
        rows.append(("traceinspect --help (console script)", best([script, "--help"], args.runs), "target < 0.2 s"))

    trace = args.trace or default_trace()
    if trace is None:
        print("no trace: run python bench/generate.py --size 100M first, or pass --trace FILE", file=sys.stderr)
    else:
        p = str(trace)
        raw = best(py(f"import msgspec; msgspec.json.decode(open({p!r}, 'rb').read())"), args.runs)
        typed = best(
            py(
                "import msgspec; from traceinspect.trace.load import Document; "
                f"msgspec.json.decode(open({p!r}, 'rb').read(), type=Document)"
            ),
            args.runs,
        )
        ana = best([sys.executable, "-m", "traceinspect", "analyze", p, "--no-cache", "-o", os.devnull], args.runs)
        mb = trace.stat().st_size / 1e6
        rows += [
            (f"raw msgspec.json.decode ({mb:.0f} MB)", raw, ""),
            ("typed decode (trace/load.py Document)", typed, f"{typed / raw:.2f}x raw"),
            ("traceinspect analyze --no-cache", ana, f"{ana / raw:.2f}x raw (target < 2x), {ana / typed:.2f}x typed"),
        ]
        if ana / raw >= 2:
            missed.append("analyze vs raw decode")

    width = max(len(r[0]) for r in rows)
    native = (
        subprocess.run(
            py("from traceinspect.trace.stream import native_enabled; print(native_enabled())"),
            env=ENV,
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "True"
    )
    print(
        f"best of {args.runs} fresh processes, wall seconds ({sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"reader: {'native scanner' if native else 'pure Python'})"
    )
    for name, t, note in rows:
        print(f"  {name:<{width}}  {t:6.3f} s  {note}")
    if missed:
        print("missed: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
