"""Peak memory per event of `traceinspect analyze`, per event kind and reader (issue 28).

    PYTHONPATH=. python3 bench/memory.py                     # 1M and 2M events of each kind, both readers
    PYTHONPATH=. python3 bench/memory.py --sizes 200k,400k --kinds kernel,cpu_op --readers native
    PYTHONPATH=. python3 bench/memory.py --stages            # also the peak after each stage

For each kind it writes two traces of N1 and N2 events of that kind (plus the same few launches, so
every trace is one analyze reports on), runs `analyze` on each in a fresh child process (os.wait4 gives
its exact peak RSS, ru_maxrss), and prints (peak(N2) - peak(N1)) / (N2 - N1): the bytes each event of
that kind costs beyond the fixed cost (interpreter, imports, chunk buffers), which cancels in the slope.
Both points are measured in the same run, one child at a time. --stages runs the stages of `analyze`
in one child instead and prints the slope of the peak after each (the peak is a high-water mark, so
each stage's number includes the ones before it). Traces go to --out and are deleted at the end
(--keep keeps them). Exit 1 when a native-reader kind is above --ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

NATIVE_CEILING = 128  # bytes per event beyond the fixed cost, native reader (docs/security.md)
PYTHON_CEILING = 256  # the same with TRACEINSPECT_NATIVE=0 (msgspec + Python extraction)

# A few ordinary launches (a CPU op, its runtime call and kernel), so that every trace is a trace
# analyze reports on, whatever the kind being measured; the same in both sizes, so part of the fixed cost.
BASE = 20


def _base_events() -> list[str]:
    out = []
    for k in range(BASE):
        t = 10 * k
        out.append(
            f'{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{t},"dur":8,"args":{{"External id":{k}}}}}'
        )
        out.append(
            f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{t + 1},"dur":2,'
            f'"args":{{"External id":{k},"correlation":{k},"cbid":211}}}}'
        )
        out.append(
            f'{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":{t + 4},"dur":5,'
            f'"args":{{"External id":{k},"correlation":{k},"device":0,"stream":7,"grid":[1,1,1],"block":[128,1,1]}}}}'
        )
    return out


# kind -> (events per unit, unit(i, ts) -> JSON events). ts in integer µs, after the base events.
def _kernel(i, t):
    c = BASE + i
    return (
        f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{t},"dur":1,'
        f'"args":{{"External id":{c},"correlation":{c},"cbid":211}}}},\n'
        f'{{"ph":"X","cat":"kernel","name":"vectorized_elementwise_kernel","pid":0,"tid":7,"ts":{t + 1},"dur":1,'
        f'"args":{{"External id":{c},"correlation":{c},"device":0,"stream":7,"grid":[80,1,1],"block":[128,1,1]}}}}'
    )


def _memcpy(i, t):
    c = BASE + i
    return (
        f'{{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":1,"ts":{t},"dur":1,'
        f'"args":{{"External id":{c},"correlation":{c},"cbid":41}}}},\n'
        f'{{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":8,"ts":{t + 1},'
        f'"dur":1,"args":{{"External id":{c},"correlation":{c},"device":0,"stream":8,"bytes":4096}}}}'
    )


def _x(cat, name, args=""):
    tail = f',"args":{{{args}}}' if args else ""
    return lambda i, t: f'{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":1,"ts":{t},"dur":1{tail}}}'


def _flow(i, t):
    c = BASE + i
    return (
        f'{{"ph":"s","cat":"ac2g","name":"ac2g","id":{c},"pid":1,"tid":1,"ts":{t},"bp":"e"}},\n'
        f'{{"ph":"f","cat":"ac2g","name":"ac2g","id":{c},"pid":0,"tid":7,"ts":{t + 1},"bp":"e"}}'
    )


KINDS = {
    "kernel": (2, _kernel),  # a runtime launch and its kernel
    "memcpy": (2, _memcpy),  # a runtime call and its copy
    "cpu_op": (1, lambda i, t: _x("cpu_op", "aten::add", f'"External id":{BASE + i}')(i, t)),
    "annotation": (1, _x("user_annotation", "forward")),
    "gpu_annotation": (1, lambda i, t: _x("gpu_user_annotation", "forward", '"device":0,"stream":7')(i, t)),
    "python": (1, _x("python_function", "torch/nn/modules/module.py(1532): _call_impl")),
    "instant": (
        1,
        lambda i, t: f'{{"ph":"i","cat":"cpu_instant_event","name":"tick","pid":1,"tid":1,"ts":{t},"s":"t"}}',
    ),
    "counter": (1, lambda i, t: f'{{"ph":"C","name":"queue","pid":1,"tid":1,"ts":{t},"args":{{"depth":3}}}}'),
    "memory": (
        1,
        lambda i, t: (
            f'{{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":{t},"s":"t","args":'
            f'{{"Addr":94000000,"Bytes":512,"Total Allocated":1048576,"Total Reserved":2097152,"Device Type":1,'
            f'"Device Id":0}}}}'
        ),
    ),
    "unknown": (1, _x("some_new_category", "mystery")),
    "flow": (2, _flow),  # an ac2g start and finish
    "metadata": (1, lambda i, t: f'{{"ph":"M","name":"thread_name","pid":1,"tid":{i},"args":{{"name":"worker"}}}}'),
}


def parse_size(s: str) -> int:
    mult = {"k": 10**3, "m": 10**6}.get(s[-1:].lower(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def generate(path: Path, kind: str, n_events: int) -> int:
    """A trace of BASE launches and about n_events events of `kind`; returns the events of that kind."""
    per, unit = KINDS[kind]
    units = max(1, n_events // per)
    t0 = 10 * BASE + 10
    with open(path, "w") as f:
        f.write('{"schemaVersion":1,"traceEvents":[\n')
        f.write(",\n".join(_base_events()))
        block = 100_000
        for s in range(0, units, block):
            f.write(",\n")
            f.write(",\n".join(unit(i, t0 + 2 * i) for i in range(s, min(units, s + block))))
        f.write("\n]}\n")
    return units * per


def measure(path: Path, reader: str, stages: bool) -> dict:
    env = dict(os.environ, TRACEINSPECT_NATIVE="1" if reader == "native" else "0")
    if stages:
        cmd = [sys.executable, __file__, "--child-stages", str(path)]
    else:
        cmd = [sys.executable, "-m", "traceinspect", "analyze", str(path), "-f", "json", "-o", os.devnull]
        cmd += ["--no-cache"]
    # one child at a time, started with Popen + wait4 so its own rusage is read (not the max over
    # all children so far, as RUSAGE_CHILDREN would give)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = time.perf_counter()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    out = p.stdout.read().decode(errors="replace")
    err = p.stderr.read().decode(errors="replace")
    p.stdout.close()
    p.stderr.close()
    rc = os.waitstatus_to_exitcode(status)
    res = {"rc": rc, "peak": ru.ru_maxrss * 1024, "wall_s": wall}
    if rc not in (0, 1):
        res["error"] = err.strip().splitlines()[-1:] or [""]
    if stages and rc == 0:
        res["stages"] = json.loads(out.strip().splitlines()[-1])
    return res


def child_stages(path: str) -> None:
    """The stages of `analyze` in this process; prints the peak RSS (bytes) after each as JSON."""
    import gc

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    import traceinspect.cli  # noqa: F401
    from traceinspect.analyze import analyze
    from traceinspect.trace import stream as S
    from traceinspect.trace.model import default_jobs, from_loaded

    res = {"imports": peak()}
    gc.disable()
    ld = S.load_streaming(path, jobs=default_jobs(path))
    res["decode"] = peak()  # read + decode + per-chunk columns
    tr = from_loaded(ld)
    del ld
    res["tables"] = peak()  # assembled, linked tables
    gc.enable()
    report = analyze(tr)
    report.to_dict()
    res["analysis"] = peak()
    print(json.dumps(res))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1M,2M", help="two event counts N1,N2 (default 1M,2M)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    ap.add_argument("--readers", default="native,python", help="native, python or both (default)")
    ap.add_argument("--stages", action="store_true", help="peak after decode, tables and the analysis")
    ap.add_argument("--out", default="/tmp/traceinspect-memory", help="where the traces are written")
    ap.add_argument("--keep", action="store_true", help="keep the generated traces")
    ap.add_argument("--json", help="also write every raw number here")
    ap.add_argument("--child-stages", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_stages:
        child_stages(a.child_stages)
        return 0
    n1, n2 = (parse_size(s) for s in a.sizes.split(","))
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    readers = [r.strip() for r in a.readers.split(",") if r.strip()]
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown kind {k!r}; one of {', '.join(KINDS)}")
    if "native" in readers:
        try:
            import traceinspect.trace._scan  # noqa: F401
        except ImportError:
            ap.error("the native scanner is not built here (python3 setup.py build_ext --inplace); or --readers python")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    stage_names = ("decode", "tables", "analysis")
    head = f"{'kind':<15}{'reader':<8}{'events':>9}{'peak MiB':>10}{'peak MiB':>10}"
    head += "".join(f"{s + ' B/ev':>15}" for s in stage_names) if a.stages else f"{'B/event':>9}  ceiling"
    print(f"N1={n1:,} N2={n2:,} events of each kind; peak RSS of one child per trace (os.wait4)")
    print(head)
    failed = False
    for kind in kinds:
        files = []
        for n in (n1, n2):
            p = out / f"memory-{kind}-{n}.json"
            files.append((p, generate(p, kind, n)))
        for reader in readers:
            r1 = measure(files[0][0], reader, a.stages)
            r2 = measure(files[1][0], reader, a.stages)
            e1, e2 = files[0][1], files[1][1]
            row = {"kind": kind, "reader": reader, "events": [e1, e2], "runs": [r1, r2]}
            line = f"{kind:<15}{reader:<8}{e2:>9,}{r1['peak'] / 2**20:>10.0f}{r2['peak'] / 2**20:>10.0f}"
            if "error" in r1 or "error" in r2:
                line += f"  exit {r1['rc']}/{r2['rc']}: {(r1.get('error') or r2.get('error'))[0]}"
            elif a.stages:
                row["slope"] = {s: (r2["stages"][s] - r1["stages"][s]) / (e2 - e1) for s in stage_names}
                line += "".join(f"{row['slope'][s]:>15.0f}" for s in stage_names)
            else:
                slope = (r2["peak"] - r1["peak"]) / (e2 - e1)
                ceiling = NATIVE_CEILING if reader == "native" else PYTHON_CEILING
                ok = slope <= ceiling
                failed |= reader == "native" and not ok
                row.update(slope=slope, ceiling=ceiling, within=ok)
                line += f"{slope:>9.0f}  {'within' if ok else 'ABOVE'} {ceiling}"
            print(line, flush=True)
            rows.append(row)
        if not a.keep:
            for p, _ in files:
                p.unlink()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
