"""Time and peak memory of the CLI on hostile inputs (the cases of issue 11, class 1). Not a test.

    PYTHONPATH=. python3 bench/hostile.py [--bomb-gib 10] [--name-mib 30] [--brackets-mib 2048]

Each case runs `python -m traceinspect analyze --no-cache FILE` in a subprocess and prints the exit
code, wall time, the child's peak RSS and the first line of stderr. Inputs are generated in a temp
directory and removed afterwards (the bracket file is written to disk at its full size).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from corpus.bombs import write_bomb  # noqa: E402  (the same generator as the tests)


def run(label: str, path: Path, **env) -> None:
    e = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TRACEINSPECT_CACHE_DIR=tempfile.mkdtemp(),
        **{k: str(v) for k, v in env.items()},
    )
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "traceinspect", "analyze", "--no-cache", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=e,
    )
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)  # this child's own peak RSS
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t
    first = (err.strip().splitlines() or ["(no error)"])[0]
    print(f"{label:<44} exit {p.returncode}  {dt:6.2f} s  peak RSS {ru.ru_maxrss / 1024:.0f} MiB\n    {first[:160]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bomb-gib", type=float, default=10)
    ap.add_argument("--name-mib", type=float, default=30)
    ap.add_argument("--brackets-mib", type=float, default=2048)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        total = int(a.bomb_gib * (1 << 30))
        for label, prefix, fill in (("NUL bomb", b'{"traceEvents": [', b"\0"), ("spaces bomb", b"", b" ")):
            p = d / f"{label.split()[0]}.json.gz"
            size = write_bomb(p, prefix, fill, total)
            print(f"# {label}: {p.stat().st_size / 1e6:.1f} MB of gzip inflating to {size / 2**30:.1f} GiB")
            run(f"{label}, default bounds", p)
            run(f"{label}, TRACEINSPECT_MAX_INFLATE=0", p, TRACEINSPECT_MAX_INFLATE=0)
            p.unlink()
        from builders import build_healthy

        b = build_healthy(steps=3)
        next(e for e in b.events if e.get("cat") == "kernel")["name"] = "void " + "cutlass" * int(
            a.name_mib * (1 << 20) / 7
        )
        p = b.write(d / "long_name.json")
        run(f"one {a.name_mib:g} MiB kernel name", p)
        p.unlink()
        p = d / "brackets.json"
        with open(p, "wb") as f:
            chunk = b"[" * (1 << 20)
            for _ in range(int(a.brackets_mib)):
                f.write(chunk)
        run(f"{a.brackets_mib:g} MiB of '['", p)
        p.unlink()
        if hasattr(os, "mkfifo"):
            fifo = d / "fifo.json"
            os.mkfifo(fifo)
            run("a FIFO as the trace path", fifo)


if __name__ == "__main__":
    main()
