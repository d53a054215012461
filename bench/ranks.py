"""Time and memory of `analyze DIR` on many ranks (issue 29 item 3; docs/multi-rank.md, "Scale").

    python bench/ranks.py --ranks 8,64,512 --size 1M [--seed DIR] [--dask] [--markdown]

For each count, bench/generate.py makes (or reuses) a folder of rank files from a real run's rank
files (default: the shared 8-rank DLRM run; rank r is seed rank r mod 8, 8 ranks per host, each
host's clock a few ms from the others, each rank its own baseTimeNanoseconds), then a fresh process
analyses it with the local process pool (2 workers on this machine) and, with --dask, another with a
Dask LocalCluster of 2 worker processes that the run starts itself. Each process reports its wall
time, the time of the reduction (alignment, job replay, report) after the last rank came back, the
parent's peak RSS, the largest worker's peak RSS (the pool's children; for Dask, read from the
workers) and a hash of the report. The two backends must give the same hash.

The parent's peak RSS is what must not grow with the ranks beyond their summaries: the table prints
its growth per rank over the smallest count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DLRM = "facebookresearch__param/et_replay/tests/data/dlrm_kineto"


def _one(d: str, mode: str) -> dict:
    """In this process: analyse folder d with the local pool or a fresh Dask LocalCluster."""
    import msgspec

    from traceinspect import multirank
    from traceinspect.api import trace_paths

    paths = trace_paths(d)
    reduce_s = {}
    real = multirank.reduce_ranks

    def timed(results):
        t = time.perf_counter()
        out = real(results)
        reduce_s["s"] = time.perf_counter() - t
        return out

    multirank.reduce_ranks = timed
    worker_mb = None
    t = time.perf_counter()
    if mode == "dask":
        import distributed

        from traceinspect.distributed import dask_mapper

        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            t = time.perf_counter()  # the cluster's start is not the analysis
            rep = multirank.analyze_many(paths, mapper=dask_mapper(cluster.scheduler_address))
            wall = time.perf_counter() - t
            with distributed.Client(cluster.scheduler_address) as c:
                peaks = c.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            worker_mb = max(peaks.values()) / 1024
    else:
        rep = multirank.analyze_many(paths, jobs=2)
        wall = time.perf_counter() - t
        worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    body = rep.to_dict()
    body.pop("tool", None)
    j = rep.cross_rank.get("job") if rep.cross_rank else None
    return {
        "mode": mode,
        "ranks": len(paths),
        "wall_s": wall,
        "reduce_s": reduce_s.get("s"),
        "parent_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mb": worker_mb,
        "report_kb": len(msgspec.json.encode(body)) / 1e3,
        "hash": hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()[:16],
        "gating_rank": rep.cross_rank.get("gating_rank") if rep.cross_rank else None,
        "job_error": j["max_error_frac"] if j else None,
    }


def _run(d: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(d), "--mode", mode], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"{mode} run on {d} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,64", help="comma-separated rank counts (default 8,64)")
    ap.add_argument("--size", default="1M", help="size of each rank file (default 1M: one copy of a DLRM rank)")
    ap.add_argument("--seed", type=Path, help="a run's folder of rank files (default: the shared DLRM run)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/traceinspect-bench"))
    ap.add_argument("--dask", action="store_true", help="also run each folder on a Dask LocalCluster")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="local", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(_one(a.one, a.mode)))
        return 0
    sys.path.insert(0, str(HERE))
    import generate as gen

    seed = a.seed
    if seed is None:
        shared = gen.shared_traces_dir()
        if shared is None or not (shared / DLRM).is_dir():
            raise SystemExit("no seed: pass --seed DIR (a run's folder of rank files)")
        seed = shared / DLRM
    size = gen.parse_size(a.size)
    rows = []
    for n in [int(x) for x in a.ranks.split(",")]:
        d = gen.ensure_ranks(a.out.resolve(), seed.resolve(), size, n, log=lambda s: None)
        mb = sum(p.stat().st_size for p in d.glob("*.json")) / 1e6
        for mode in ["local"] + (["dask"] if a.dask else []):
            r = _run(d, mode)
            r["folder_mb"] = mb
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    head = "| ranks | mode | JSON | wall | per rank | reduction | parent peak | growth per rank | worker peak | same report |"
    print(head)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        local = next(x for x in rows if x["ranks"] == r["ranks"] and x["mode"] == "local")
        base = min((x for x in rows if x["mode"] == r["mode"]), key=lambda x: x["ranks"])
        grow = (
            (r["parent_peak_mb"] - base["parent_peak_mb"]) / (r["ranks"] - base["ranks"]) * 1e3
            if r["ranks"] > base["ranks"]
            else None
        )
        print(
            f"| {r['ranks']} | {r['mode']} | {r['folder_mb']:.0f} MB | {r['wall_s']:.1f} s | "
            f"{r['wall_s'] / r['ranks'] * 1e3:.0f} ms | {r['reduce_s']:.2f} s | {r['parent_peak_mb']:.0f} MB | "
            f"{'-' if grow is None else f'{grow:.0f} KB'} | {r['worker_peak_mb']:.0f} MB | "
            f"{'yes' if r['hash'] == local['hash'] else 'NO'} |"
        )
    print(f"\n{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}; python {sys.version.split()[0]}")
    return 0 if all(r["hash"] == next(x for x in rows if x["ranks"] == r["ranks"])["hash"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
