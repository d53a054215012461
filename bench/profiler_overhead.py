"""What each torch.profiler setting adds to the host time of a loop of small aten ops (issue 27).

The numbers behind traceinspect/facts/profiler_overhead.py's per-unit costs and docs/trace-quality.md,
"Profiler overhead". Needs torch (a CPU build is enough: `pip install torch==2.13.0`).

The workload is a CPU training loop whose ops are so small that per-op overhead dominates: a 6-layer
MLP of Linear(32, 32) + ReLU, batch 4, forward, MSE loss, backward and an SGD step, with torch on one
thread. Each configuration profiles `--steps` such steps (CPU activity only; one prof.step() per step)
and is repeated `--repeats` times, the configurations interleaved so drift on a shared machine hits
them alike:

  none        no profiler (the loop alone)
  default     torch.profiler.profile(activities=[CPU]) with every option off (the baseline)
  shapes      + record_shapes=True
  stack       + with_stack=True
  memory      + profile_memory=True
  flops       + with_flops=True
  all         all four on (do the costs add up?)

Each run measures the thread's CPU time (time.thread_time: what the loop's thread spent, which the
other processes of a shared machine do not inflate) and the wall time of the profiled steps, then
exports the trace and counts what the profiler recorded in it: CPU ops (cat cpu_op), Python function
events (python_function) and memory events ([memory]), plus each op's recorded duration.

Per setting, against `default` in the same repeat:
  added per op      (time(setting) - time(default)) / CPU ops recorded
  added per unit    the same difference over what the setting records: CPU ops (record_shapes,
                    with_flops), Python function events (with_stack), [memory] events (profile_memory)

with_flops=True also records the shapes (torch 2.13 writes `Input Dims` for it), so its row is
measured against `shapes`, not `default`: what it adds over record_shapes.
  op growth         median over op names of (median recorded duration with the setting / without) - 1

`--workload alloc` runs 100 out-of-place adds per step instead (each allocates its result and frees
the previous one): the MLP loop makes too few allocator calls for profile_memory's cost per [memory]
event to stand out of the noise.

Usage (from the repository root):

    python3 bench/profiler_overhead.py --repeats 11       # ~2 min on the 2-core machine
    python3 bench/profiler_overhead.py --repeats 11 --workload alloc
    python3 bench/profiler_overhead.py --repeats 3 --json /tmp/overhead.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict

CONFIGS = {
    "none": None,
    "default": {},
    "shapes": {"record_shapes": True},
    "stack": {"with_stack": True},
    "memory": {"profile_memory": True},
    "flops": {"with_flops": True},
    "all": {"record_shapes": True, "with_stack": True, "profile_memory": True, "with_flops": True},
}
# the unit each setting records once per occurrence: what its cost is divided by
UNIT = {"shapes": "cpu_op", "stack": "python_function", "memory": "memory", "flops": "cpu_op", "all": "cpu_op"}
# with_flops=True records the shapes too (torch 2.13 writes `Input Dims` for it, and no `flops` arg on
# CPU ops): its own cost is what it adds over record_shapes
BASE = {"flops": "shapes"}


def build(torch, width: int, layers: int, batch: int):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)
    y = torch.randn(batch, width)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    return step


def build_alloc(torch, width: int, n: int = 100):
    """The profile_memory workload: n out-of-place adds per step, each one allocator call for its
    result and one for freeing the previous result (the MLP loop makes few allocator calls per op)."""
    a, b = torch.randn(width, width), torch.randn(width, width)

    def step():
        c = None
        for _ in range(n):
            c = torch.add(a, b)
        return c

    return step


def count(path: str) -> dict:
    """What the exported trace recorded: CPU ops, Python function events, memory events, and each op
    name's recorded durations (us)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    out = {"cpu_op": 0, "python_function": 0, "memory": 0}
    durs: dict[str, list[float]] = defaultdict(list)
    for e in doc.get("traceEvents", []):
        cat = e.get("cat")
        if cat == "cpu_op":
            out["cpu_op"] += 1
            durs[e.get("name", "")].append(float(e.get("dur", 0.0)))
        elif cat == "python_function":
            out["python_function"] += 1
        elif e.get("name") == "[memory]":
            out["memory"] += 1
    out["durs"] = {k: statistics.median(v) for k, v in durs.items() if len(v) >= 20}
    return out


def run_one(torch, step, cfg, steps: int, tmp: str, tag: str) -> dict:
    for _ in range(20):  # warm the loop (allocator, dispatcher caches) outside the measurement
        step()
    if cfg is None:
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(steps):
            step()
        return {"cpu_s": time.thread_time() - c0, "wall_s": time.perf_counter() - w0}
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], **cfg)
    prof.__enter__()
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(steps):
        step()
        prof.step()
    cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
    prof.__exit__(None, None, None)
    path = os.path.join(tmp, f"{tag}.json")
    prof.export_chrome_trace(path)
    rec = count(path)
    os.unlink(path)
    return {"cpu_s": cpu, "wall_s": wall, **rec}


def spread(xs: list[float]) -> str:
    """median [min, max]"""
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument(
        "--workload",
        choices=("mlp", "alloc"),
        default="mlp",
        help="mlp: the small MLP training loop; alloc: 100 out-of-place adds per step (for profile_memory)",
    )
    ap.add_argument("--json", help="write every raw number here")
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs torch: pip install torch==2.13.0 (a CPU build is enough)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    step = build(torch, a.width, a.layers, a.batch) if a.workload == "mlp" else build_alloc(torch, a.width)
    runs: dict[str, list[dict]] = {k: [] for k in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for name, cfg in CONFIGS.items():
                runs[name].append(run_one(torch, step, cfg, a.steps, tmp, f"{name}-{r}"))
    ops = [x["cpu_op"] for x in runs["default"]]
    print(
        f"{a.workload}: torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(load {os.getloadavg()[0]:.1f}), {a.repeats} repeats x {a.steps} steps; "
        f"{statistics.median(ops) / a.steps:.0f} CPU ops per step recorded"
    )
    for name in ("none", "default"):
        us = [1e6 * x["cpu_s"] / a.steps for x in runs[name]]
        print(f"{name:8s} CPU us/step {spread(us)}")
    base_op = [
        1e6 * (d["cpu_s"] - n["cpu_s"]) / d["cpu_op"] for d, n in zip(runs["default"], runs["none"], strict=True)
    ]
    print(f"default  profiler itself, CPU us per op: {spread(base_op)}")
    summary: dict[str, dict] = {"default": {"per_op_cpu_us": statistics.median(base_op)}}
    print("against default; flops against shapes (with_flops records the shapes too)")
    print("setting  | added CPU us/op | added wall us/op | units/step | added CPU us/unit | op growth")
    for name in ("shapes", "stack", "memory", "flops", "all"):
        per_op, per_op_wall, per_unit, units, growth = [], [], [], [], []
        for s, d in zip(runs[name], runs[BASE.get(name, "default")], strict=True):
            n_ops = s["cpu_op"]
            per_op.append(1e6 * (s["cpu_s"] - d["cpu_s"]) / n_ops)
            per_op_wall.append(1e6 * (s["wall_s"] - d["wall_s"]) / n_ops)
            u = s[UNIT[name]]
            units.append(u / a.steps)
            per_unit.append(1e6 * (s["cpu_s"] - d["cpu_s"]) / u if u else float("nan"))
            common = set(s["durs"]) & set(d["durs"])
            ratios = [s["durs"][k] / d["durs"][k] - 1 for k in common if d["durs"][k] > 0]
            growth.append(100 * statistics.median(ratios) if ratios else float("nan"))
        summary[name] = {
            "unit": UNIT[name],
            "against": BASE.get(name, "default"),
            "per_op_cpu_us": statistics.median(per_op),
            "per_unit_cpu_us": statistics.median(per_unit),
            "units_per_step": statistics.median(units),
            "op_growth_pct": statistics.median(growth),
            "per_op_cpu_us_all": per_op,
            "per_unit_cpu_us_all": per_unit,
        }
        print(
            f"{name:8s} | {spread(per_op):>15s} | {spread(per_op_wall):>16s} | "
            f"{statistics.median(units):7.0f} {UNIT[name]} | {spread(per_unit):>17s} | "
            f"{statistics.median(growth):+.0f}% [{min(growth):+.0f}%, {max(growth):+.0f}%]"
        )
    if a.json:
        raw = {k: [{kk: vv for kk, vv in x.items() if kk != "durs"} for x in v] for k, v in runs.items()}
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "args": vars(a), "summary": summary, "runs": raw}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
