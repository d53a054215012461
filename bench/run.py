"""Benchmark `traceinspect analyze` against raw JSON decoders and HolisticTraceAnalysis (HTA).

One command generates (or reuses) large traces with bench/generate.py and measures, on the same
files, each tool in a FRESH subprocess: wall time (process start to exit, interpreter start and
imports included) and peak RSS (the larger of os.wait4's ru_maxrss and, with psutil, the polled
RSS sum of the process tree, which covers worker pools):

  analyze  `python -m traceinspect analyze FILE --format json -o /dev/null` (end to end)
  msgspec  typed msgspec decode of the whole traceEvents array (ph, cat, name, pid, tid, ts, dur,
           args as msgspec.Raw), gunzip included for .gz: the practical limit for JSON in Python
  orjson   orjson.loads of the same bytes (a full dict tree)
  hta      hta.trace_analysis.TraceAnalysis(trace_dir=DIR), DIR holding only a link to the file

Usage (from the repository root):

  python bench/run.py --sizes 100M,500M,1G --gzip --ranks 8 --json /tmp/bench.json \
      --markdown docs/benchmarks.md

Sizes are decimal (1M = 10**6 bytes); MB/s is always of the uncompressed JSON.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
RESULT_TAG = "BENCH_RESULT "
TOOLS = ("analyze", "msgspec", "orjson", "hta")

TARGETS = [
    ("analyze throughput, .json", ">= 200 MB/s of uncompressed JSON, end to end, on the 2-core machine"),
    ("analyze vs raw decode", "analyze time <= 1.5x the raw msgspec typed decode time"),
    ("analyze vs HTA", "analyze >= 20x faster than HTA's TraceAnalysis load"),
    ("memory", "peak RSS <= uncompressed file size"),
    ("analyze throughput, .json.gz", ">= 150 MB/s of uncompressed JSON"),
    ("linear time", "s/GB at the largest size <= 1.25x s/GB at the smallest (100M/500M/1G series)"),
    ("8 ranks in parallel", "`analyze DIR` on 8 rank files >= 1.7x faster than the 8 files one at a time (2 cores)"),
]


# --------------------------------------------------------------------------- inner tasks
# Run as `python bench/run.py --task NAME PATH` in a fresh interpreter. Only the stdlib is
# imported at module level so that the HTA task can run under another venv's python.


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        import gzip

        data = gzip.decompress(data)
    return data


def task_msgspec(path: str) -> dict:
    from typing import Union

    import msgspec

    # defstruct: class bodies inside a function would not resolve under `from __future__ import annotations`
    Event = msgspec.defstruct(
        "Event",
        [
            ("ph", str, ""),
            ("cat", str, ""),
            ("name", str, ""),
            ("pid", Union[int, str], 0),
            ("tid", Union[int, str], 0),
            ("ts", float, 0.0),
            ("dur", Union[float, None], None),
            ("args", msgspec.Raw, msgspec.Raw(b"")),
        ],
        gc=False,
    )
    Doc = msgspec.defstruct("Doc", [("traceEvents", list[Event], [])], gc=False)

    t = time.perf_counter()
    data = _read(path)
    t_read = time.perf_counter() - t
    doc = msgspec.json.Decoder(Doc).decode(data)
    return {"events": len(doc.traceEvents), "read_s": t_read, "inner_s": time.perf_counter() - t}


def task_orjson(path: str) -> dict:
    import orjson

    t = time.perf_counter()
    data = _read(path)
    t_read = time.perf_counter() - t
    doc = orjson.loads(data)
    return {"events": len(doc["traceEvents"]), "read_s": t_read, "inner_s": time.perf_counter() - t}


def task_hta(trace_dir: str) -> dict:
    import logging

    logging.disable(logging.WARNING)  # HTA logs every parse step at INFO
    t = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    t_import = time.perf_counter() - t
    t = time.perf_counter()
    ta = TraceAnalysis(trace_dir=trace_dir)
    inner = time.perf_counter() - t
    rows = sum(len(ta.t.get_trace(r)) for r in ta.t.get_all_traces())
    return {"events": rows, "import_s": t_import, "inner_s": inner}


def task_probe(what: str) -> dict:
    """Is a module importable here? Returns its version."""
    import importlib

    mod = importlib.import_module(what)
    ver = getattr(mod, "__version__", None)
    if ver is None:
        try:
            from importlib.metadata import version

            ver = version({"hta": "HolisticTraceAnalysis"}.get(what, what))
        except Exception:
            ver = "?"
    return {"version": str(ver)}


INNER = {"msgspec": task_msgspec, "orjson": task_orjson, "hta": task_hta, "probe": task_probe}


def run_task(name: str, path: str) -> int:
    res = INNER[name](path)
    sys.stdout.write("\n" + RESULT_TAG + json.dumps(res) + "\n")
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------- measuring


def _total_mem() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 * 10**9


# The measured command is started by this tiny wrapper, not by run.py itself: Linux carries a
# process's RSS high-water mark across fork+exec into ru_maxrss, so a child forked from the big
# run.py process (which holds the parsed seed) would report run.py's peak instead of its own.
_WRAPPER = r"""
import os, sys, time, json
out, limit, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    if limit:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
with open(out, "w") as f:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "seconds": wall, "maxrss_kb": ru.ru_maxrss,
               "utime": ru.ru_utime, "stime": ru.ru_stime}, f)
"""


def measure(
    cmd: list[str], timeout: float, mem_limit: int | None, env: dict | None = None, cwd: str | None = None
) -> dict:
    """Run cmd fresh (under _WRAPPER, in a new session); wall seconds, peak RSS, rc, output tails."""
    try:
        import psutil
    except ImportError:
        psutil = None

    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    fd, res_path = tempfile.mkstemp(prefix="bench-rusage-", suffix=".json")
    os.close(fd)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-S", "-c", _WRAPPER, res_path, str(mem_limit or 0), *cmd],
        stdout=out,
        stderr=err,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    done = threading.Event()
    tree_peak = [0]
    timed_out = [False]

    def poll():  # RSS sum of the measured process and its workers (the wrapper excluded)
        if psutil is None:
            return
        try:
            root = psutil.Process(p.pid)
        except psutil.Error:
            return
        while not done.wait(0.1):
            try:
                procs = root.children(recursive=True)
            except psutil.Error:
                break
            total = 0
            for q in procs:
                try:
                    total += q.memory_info().rss
                except psutil.Error:
                    pass
            tree_peak[0] = max(tree_peak[0], total)

    def killer():
        if not done.wait(timeout):
            timed_out[0] = True
            try:
                os.killpg(p.pid, 9)  # the session started above: wrapper, command, its workers
            except ProcessLookupError:
                pass

    th = [threading.Thread(target=poll, daemon=True), threading.Thread(target=killer, daemon=True)]
    for t in th:
        t.start()
    p.wait()
    outer = time.perf_counter() - t0
    done.set()
    for t in th:
        t.join()
    try:  # workers left behind by a killed or crashed command
        os.killpg(p.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        ru = json.loads(Path(res_path).read_text())
    except (OSError, ValueError):
        ru = {"rc": p.returncode if p.returncode else -9, "seconds": outer, "maxrss_kb": 0}
    finally:
        os.unlink(res_path)
    out.seek(0)
    err.seek(0)
    stdout = out.read().decode(errors="replace")
    stderr = err.read().decode(errors="replace")
    maxrss = ru["maxrss_kb"] * 1024
    inner = None
    for line in stdout.splitlines()[::-1]:
        if line.startswith(RESULT_TAG):
            inner = json.loads(line[len(RESULT_TAG) :])
            break
    return {
        "cmd": cmd,
        "rc": ru["rc"],
        "seconds": ru["seconds"],
        "timed_out": timed_out[0],
        "cpu_seconds": ru.get("utime", 0) + ru.get("stime", 0),
        "maxrss_bytes": maxrss,
        "tree_peak_bytes": tree_peak[0],
        "peak_rss_bytes": max(maxrss, tree_peak[0]),
        "inner": inner,
        "stderr_tail": stderr[-1500:],
        "stdout_tail": stdout[-500:],
    }


def warm_cache(path: Path) -> None:
    """Read the file once so every tool starts from the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def _status(m: dict, mem_limit: int | None) -> tuple[str, str]:
    if m["timed_out"]:
        return "timeout", f"killed after {m['seconds']:.0f} s"
    if m["rc"] != 0:
        tail = (m["stderr_tail"] or m["stdout_tail"]).strip().splitlines()
        last = tail[-1] if tail else ""
        if "MemoryError" in m["stderr_tail"] or m["rc"] == -9:
            return "oom", f"rc={m['rc']} (memory limit {mem_limit / 1e9:.0f} GB?) {last[:120]}"
        return "error", f"rc={m['rc']}: {last[:160]}"
    return "ok", ""


class Bench:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.results: list[dict] = []
        self.ranks: dict | None = None
        self.notes: list[str] = []
        self.py = a.python
        self.mem_limit = a.mem_limit
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = str(REPO_ROOT) + (
            os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else ""
        )
        self.env.setdefault("PYTHONHASHSEED", "0")
        # bytecode cached as an installed package has it (pip compiles it; a checkout writes it on the first
        # run): a sandbox's PYTHONDONTWRITEBYTECODE=1 would have every process compile traceinspect's source
        # again (0.1 s). The probes below run first and fill the cache; it lives outside the repository.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "traceinspect-bench" / "pycache")
        self.versions: dict[str, str] = {}
        self.analyze_ok, self.analyze_why = self._probe_analyze()
        self.hta_py, self.hta_why = self._probe_hta()
        for mod in ("msgspec", "orjson"):
            m = measure([self.py, str(HERE / "run.py"), "--task", "probe", mod], 60, None, self.env)
            self.versions[mod] = m["inner"]["version"] if m["inner"] else "not installed"
        # which events decoder analyze runs: the native scanner (C extension) or msgspec + Python
        probe = subprocess.run(
            [
                self.py,
                "-c",
                "from traceinspect.trace.stream import native_enabled as n; "
                "print('native scanner' if n() else 'msgspec + Python extraction')",
            ],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        self.versions["traceinspect decoder"] = probe.stdout.strip() or "unknown"

    # ---------------------------------------------------------------- probes
    def _probe_analyze(self) -> tuple[bool, str]:
        if "analyze" not in self.a.tools:
            return False, "not selected"
        m = measure([self.py, "-m", "traceinspect", "analyze", "--help"], 120, None, self.env, cwd=self.a.out)
        if m["rc"] == 0:
            return True, ""
        tail = (m["stderr_tail"] or m["stdout_tail"]).strip().splitlines()
        return False, (tail[-1] if tail else f"rc={m['rc']}")[:200]

    def _probe_hta(self) -> tuple[str | None, str]:
        if self.a.skip_hta or "hta" not in self.a.tools:
            return None, "skipped"
        for py in [self.a.hta_python] if self.a.hta_python else [self.py, "/tmp/venv-hta/bin/python"]:
            if not py or not Path(py).exists():
                continue
            m = measure([py, str(HERE / "run.py"), "--task", "probe", "hta"], 300, None, dict(os.environ))
            if m["rc"] == 0 and m["inner"]:
                self.versions["HolisticTraceAnalysis"] = m["inner"]["version"] + f" ({py})"
                return py, ""
        return None, "not installed"

    # ---------------------------------------------------------------- runs
    def _cmd(self, tool: str, path: Path) -> tuple[list[str], dict]:
        runpy = str(HERE / "run.py")
        if tool == "analyze":
            # --no-cache: every measurement parses the file (the report cache would serve repeats)
            return [
                self.py,
                "-m",
                "traceinspect",
                "analyze",
                str(path),
                "--format",
                "json",
                "-o",
                os.devnull,
                "--no-cache",
                *shlex.split(self.a.analyze_args),
            ], self.env
        if tool == "hta":
            d = self.a.out / f"hta-{path.name.replace('.', '_')}"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            (d / path.name).symlink_to(path)
            return [self.hta_py, runpy, "--task", "hta", str(d)], dict(os.environ)
        return [self.py, runpy, "--task", tool, str(path)], self.env

    def run_tools(self, tools, path: Path, label: str, json_bytes: int, gz: bool) -> list[dict]:
        """Each tool on one file, --repeat rounds interleaved (tool A, tool B, A, B, ...: a noisy machine's
        slow spell falls on both), the best time of each kept."""
        rows, best = {}, {}
        for tool in tools:
            row = {
                "label": label,
                "file": str(path),
                "gz": gz,
                "json_bytes": json_bytes,
                "file_bytes": path.stat().st_size,
                "tool": tool,
                "status": "ok",
                "note": "",
                "seconds": None,
                "peak_rss_bytes": None,
            }
            if tool == "analyze" and not self.analyze_ok:
                row.update(status="n/a", note=self.analyze_why)
            elif tool == "hta" and self.hta_py is None:
                row.update(status=self.hta_why)
            elif tool == "hta" and json_bytes > self.a.hta_max_bytes:
                row.update(status="skipped", note="larger than --hta-max-size")
            else:
                best[tool] = None
            rows[tool] = row
        failed = set()
        for _ in range(self.a.repeat):
            for tool in best:
                if tool in failed:
                    continue
                cmd, env = self._cmd(tool, path)
                m = measure(cmd, self.a.timeout, self.mem_limit, env, cwd=str(self.a.out))
                st, note = _status(m, self.mem_limit)
                if st != "ok":
                    best[tool] = dict(m, status=st, note=note)
                    failed.add(tool)
                elif best[tool] is None or m["seconds"] < best[tool]["seconds"]:
                    best[tool] = dict(m, status=st, note=note)
        for tool, b in best.items():
            row = rows[tool]
            keys = ("seconds", "cpu_seconds", "peak_rss_bytes", "maxrss_bytes", "tree_peak_bytes", "rc", "inner")
            row.update({k: b[k] for k in keys + ("status", "note")})
            row["cmd"] = " ".join(shlex.quote(c) for c in b["cmd"])
            if tool == "hta" and b["status"] == "ok":
                shutil.rmtree(self.a.out / f"hta-{path.name.replace('.', '_')}", ignore_errors=True)
        for tool in tools:
            self.results.append(rows[tool])
            self._print_row(rows[tool])
        return [rows[t] for t in tools]

    def _print_row(self, r: dict) -> None:
        print("  " + _fmt_row(r), flush=True)

    def run(self) -> None:
        import generate as gen

        out = self.a.out
        out.mkdir(parents=True, exist_ok=True)
        seed_path = (self.a.seed or gen.default_seed()).resolve()
        self.seed_path = seed_path
        print(f"seed: {seed_path}\nout:  {out}", flush=True)
        print(
            f"analyze: {'ok' if self.analyze_ok else 'n/a (' + self.analyze_why + ')'}; "
            f"hta: {self.versions.get('HolisticTraceAnalysis', self.hta_why)}",
            flush=True,
        )
        seed = None
        for size_txt in self.a.sizes:
            size = gen.parse_size(size_txt)
            if seed is None:
                seed = gen.Seed(seed_path)
            pj, pg = gen.ensure_trace(
                out,
                seed_path,
                size,
                self.a.gzip,
                self.a.gzip_level,
                force=self.a.regen,
                seed=seed,
                log=lambda s: print("  " + s, flush=True),
            )
            json_bytes = gen.read_meta(pj)["json_bytes"]
            for path, gz in ((pj, False), (pg, True)):
                if path is None:
                    continue
                warm_cache(path)
                print(
                    f"{path.name}: {json_bytes / 1e6:.0f} MB JSON, {path.stat().st_size / 1e6:.0f} MB on disk",
                    flush=True,
                )
                self.run_tools(self.a.tools, path, gen.size_label(size), json_bytes, gz)
        if self.a.ranks:
            self.run_ranks(gen, seed_path, seed)

    def run_ranks(self, gen, seed_path: Path, seed) -> None:
        size = gen.parse_size(self.a.rank_size)
        d = gen.ensure_ranks(
            self.a.out,
            seed_path,
            size,
            self.a.ranks,
            force=self.a.regen,
            seed=seed,
            log=lambda s: print("  " + s, flush=True),
        )
        files = sorted(p for p in d.iterdir() if p.name.endswith(".json"))
        total = sum(p.stat().st_size for p in files)
        for p in files:
            warm_cache(p)
        print(f"{d.name}: {len(files)} files, {total / 1e6:.0f} MB JSON", flush=True)
        r = {"dir": str(d), "files": len(files), "json_bytes": total, "status": "ok", "note": ""}
        if not self.analyze_ok:
            r.update(status="n/a", note=self.analyze_why)
        else:
            extra = shlex.split(self.a.analyze_args)
            par = measure(
                [self.py, "-m", "traceinspect", "analyze", str(d), "--format", "json", "-o", os.devnull, *extra],
                self.a.timeout,
                self.mem_limit,
                self.env,
                cwd=str(self.a.out),
            )
            st, note = _status(par, self.mem_limit)
            r["parallel"] = {
                "seconds": par["seconds"],
                "peak_rss_bytes": par["peak_rss_bytes"],
                "status": st,
                "note": note,
            }
            seq_s, seq_rss, seq_st = 0.0, 0, "ok"
            for p in files:
                m = measure(
                    [
                        self.py,
                        "-m",
                        "traceinspect",
                        "analyze",
                        str(p),
                        "--format",
                        "json",
                        "-o",
                        os.devnull,
                        "--no-cache",
                        *extra,
                    ],
                    self.a.timeout,
                    self.mem_limit,
                    self.env,
                    cwd=str(self.a.out),
                )
                s, n = _status(m, self.mem_limit)
                if s != "ok":
                    seq_st, note = s, n
                    break
                seq_s += m["seconds"]
                seq_rss = max(seq_rss, m["peak_rss_bytes"])
            r["sequential"] = {
                "seconds": seq_s,
                "peak_rss_bytes": seq_rss,
                "status": seq_st,
                "how": f"{len(files)} separate `analyze FILE` processes",
            }
            if st == "ok" and seq_st == "ok":
                r["speedup"] = seq_s / par["seconds"]
            else:
                r.update(status="error", note=note)
            if self.a.seq_args and st == "ok":
                one = measure(
                    [
                        self.py,
                        "-m",
                        "traceinspect",
                        "analyze",
                        str(d),
                        "--format",
                        "json",
                        "-o",
                        os.devnull,
                        *extra,
                        *shlex.split(self.a.seq_args),
                    ],
                    self.a.timeout,
                    self.mem_limit,
                    self.env,
                    cwd=str(self.a.out),
                )
                s1, n1 = _status(one, self.mem_limit)
                r["one_process"] = {
                    "seconds": one["seconds"],
                    "peak_rss_bytes": one["peak_rss_bytes"],
                    "status": s1,
                    "note": n1,
                    "args": self.a.seq_args,
                }
                if s1 == "ok":
                    r["speedup_vs_one_process"] = one["seconds"] / par["seconds"]
        self.ranks = r
        print("  " + ranks_line(r), flush=True)


# --------------------------------------------------------------------------- reporting


def _mb(b) -> str:
    return "-" if b is None else f"{b / 1e6:,.0f}"


def _fmt_row(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['tool']:<8} {r['status']}" + (f" ({r['note']})" if r["note"] else "")
    mbs = r["json_bytes"] / 1e6 / r["seconds"]
    return (
        f"{r['tool']:<8} {r['seconds']:8.2f} s  {mbs:7.0f} MB/s  peak RSS {_mb(r['peak_rss_bytes'])} MB "
        f"({r['peak_rss_bytes'] / r['json_bytes']:.2f}x JSON)"
    )


def _get(results, label, gz, tool):
    for r in results:
        if r["label"] == label and r["gz"] == gz and r["tool"] == tool and r["status"] == "ok":
            return r
    return None


def table_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        name = f"{r['label']}{' .gz' if r['gz'] else ''}"
        if r["status"] == "ok":
            cpu = r.get("cpu_seconds")
            rows.append(
                [
                    name,
                    _mb(r["json_bytes"]),
                    r["tool"],
                    f"{r['seconds']:.2f}",
                    f"{cpu:.2f}" if cpu else "-",
                    f"{r['json_bytes'] / 1e6 / r['seconds']:.0f}",
                    _mb(r["peak_rss_bytes"]),
                    f"{r['peak_rss_bytes'] / r['json_bytes']:.2f}",
                ]
            )
        else:
            st = r["status"] + (f": {r['note']}" if r["note"] and r["status"] not in ("n/a",) else "")
            rows.append([name, _mb(r["json_bytes"]), r["tool"], st, "", "", "", ""])
    return rows


HEAD = ["file", "JSON MB", "tool", "seconds", "CPU s", "MB/s", "peak RSS MB", "RSS / JSON size"]


def ratio_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    seen = []
    for r in results:
        key = (r["label"], r["gz"])
        if key in seen:
            continue
        seen.append(key)
        an, ms, hta = (_get(results, *key, t) for t in ("analyze", "msgspec", "hta"))
        a_ms = f"{an['seconds'] / ms['seconds']:.2f}" if an and ms else "n/a"
        h_a = f"{hta['seconds'] / an['seconds']:.1f}" if an and hta else "n/a"
        h_ms = f"{hta['seconds'] / ms['seconds']:.1f}" if ms and hta else "n/a"
        rss = f"{an['peak_rss_bytes'] / an['json_bytes']:.2f}" if an else "n/a"
        rows.append([f"{key[0]}{' .gz' if key[1] else ''}", a_ms, h_a, rss, h_ms])
    return rows


RATIO_HEAD = [
    "file",
    "analyze / msgspec time",
    "HTA / analyze time",
    "analyze peak RSS / JSON size",
    "HTA / msgspec time",
]


def linearity(results: list[dict]) -> list[tuple[str, list[tuple[str, float]], float | None]]:
    out = []
    for tool in TOOLS:
        pts = [
            (r["label"], r["seconds"] / (r["json_bytes"] / 1e9))
            for r in results
            if r["tool"] == tool and not r["gz"] and r["status"] == "ok"
        ]
        if len(pts) >= 2:
            out.append((tool, pts, pts[-1][1] / pts[0][1]))
        elif pts:
            out.append((tool, pts, None))
    return out


def lin_line(tool, pts, ratio) -> str:
    s = ", ".join(f"{lab} {v:.2f} s/GB" for lab, v in pts)
    return f"{tool}: {s}" + (f" (largest/smallest {ratio:.2f})" if ratio is not None else "")


def ranks_line(r: dict | None) -> str:
    if not r:
        return "not run"
    if r["status"] != "ok":
        return f"{r['files']} files, {r['json_bytes'] / 1e6:.0f} MB: {r['status']} ({r['note']})"
    p, s = r["parallel"], r["sequential"]
    line = (
        f"{r['files']} files, {r['json_bytes'] / 1e6:.0f} MB: `analyze DIR` {p['seconds']:.2f} s "
        f"(peak RSS of the process tree {_mb(p['peak_rss_bytes'])} MB); one at a time as "
        f"{s['how']} {s['seconds']:.2f} s -> speedup {r['speedup']:.2f}x"
    )
    one = r.get("one_process")
    if one and one["status"] == "ok":
        line += (
            f"; `analyze DIR {one['args']}` (same process, no pool) {one['seconds']:.2f} s "
            f"-> speedup {r['speedup_vs_one_process']:.2f}x"
        )
    elif one:
        line += f"; `analyze DIR {one['args']}`: {one['status']} {one['note']}"
    return line


def ranks_speedup(r: dict | None) -> float | None:
    """The stricter speedup: vs the single-process run when measured, else vs separate processes."""
    if not r:
        return None
    return r.get("speedup_vs_one_process") or r.get("speedup")


def target_status(results: list[dict], ranks: dict | None) -> list[tuple[str, str, str]]:
    """(target, verdict, measured) per target. The verdict is PASS or FAIL when every measured file
    agrees, else it names the files that pass and those that fail (small files are dominated by the
    fixed ~0.5 s of interpreter start and pandas import, big ones by the parse)."""
    an = [r for r in results if r["tool"] == "analyze" and r["status"] == "ok"]
    out = []

    def lab(r):
        return f"{r['label']}{' .gz' if r['gz'] else ''}"

    def verdict(checks, detail):
        if not checks:
            return "not measured", detail
        ok = [label for label, good in checks if good]
        bad = [label for label, good in checks if not good]
        if not bad:
            return "PASS", detail
        if not ok:
            return "FAIL", detail
        return f"PASS at {', '.join(ok)}; FAIL at {', '.join(bad)}", detail

    plain = [r for r in an if not r["gz"]]
    gzs = [r for r in an if r["gz"]]
    out.append(
        verdict(
            [(lab(r), r["json_bytes"] / 1e6 / r["seconds"] >= 200) for r in plain],
            ", ".join(f"{r['label']} {r['json_bytes'] / 1e6 / r['seconds']:.0f} MB/s" for r in plain),
        )
    )
    rs = [(r, _get(results, r["label"], r["gz"], "msgspec")) for r in an]
    rs = [(r, m) for r, m in rs if m]
    out.append(
        verdict(
            [(lab(r), r["seconds"] / m["seconds"] <= 1.5) for r, m in rs],
            ", ".join(f"{lab(r)} {r['seconds'] / m['seconds']:.2f}x" for r, m in rs),
        )
    )
    hs = [(r, _get(results, r["label"], r["gz"], "hta")) for r in an]
    hs = [(r, h) for r, h in hs if h]
    out.append(
        verdict(
            [(lab(r), h["seconds"] / r["seconds"] >= 20) for r, h in hs],
            ", ".join(f"{lab(r)} {h['seconds'] / r['seconds']:.1f}x" for r, h in hs),
        )
    )
    out.append(
        verdict(
            [(lab(r), r["peak_rss_bytes"] <= r["json_bytes"]) for r in an],
            ", ".join(f"{lab(r)} {r['peak_rss_bytes'] / r['json_bytes']:.2f}x" for r in an),
        )
    )
    out.append(
        verdict(
            [(lab(r), r["json_bytes"] / 1e6 / r["seconds"] >= 150) for r in gzs],
            ", ".join(f"{r['label']} .gz {r['json_bytes'] / 1e6 / r['seconds']:.0f} MB/s" for r in gzs),
        )
    )
    lin = [x for x in linearity(an) if x[0] == "analyze" and x[2] is not None]
    out.append(verdict([("series", x[2] <= 1.25) for x in lin], lin_line(*lin[0]) if lin else ""))
    sp = ranks_speedup(ranks)
    out.append(
        verdict(
            [("8 ranks", sp >= 1.7)] if sp else [],
            f"{sp:.2f}x" + (" (vs the -j 1 run)" if ranks.get("speedup_vs_one_process") else " (vs separate processes)")
            if sp
            else "",
        )
    )
    return [(name, v, d) for (name, _), (v, d) in zip(TARGETS, out)]


def machine_info() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        free = subprocess.run(["free", "-h"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        free = f"MemTotal {_total_mem() / 2**30:.1f} GiB"
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        nproc = str(len(os.sched_getaffinity(0)))
    return {
        "nproc": nproc,
        "cpu": cpu,
        "free_h": free,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(head: list[str], rows: list[list[str]]) -> str:
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    fmt = "  ".join("{:<%d}" % n for n in w)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * n for n in w))] + [fmt.format(*map(str, r)) for r in rows])


def markdown(b: Bench, command: str, machine: dict) -> str:
    tgt = target_status(b.results, b.ranks)
    lin = linearity(b.results)
    parts = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` (see `bench/README.md` for what each number means). "
        "Traces are made by repeating the steps of a real Kineto trace (`bench/generate.py`); "
        "every number is one fresh process on warm page cache, with Python's bytecode cache filled "
        "(as an installed package has it).",
        "",
        "## Targets",
        "",
        md_table(
            ["target", "requirement", "status in this run", "measured"],
            [[n, req, v, d] for (n, req), (_, v, d) in zip(TARGETS, tgt)],
        ),
        "",
        "## Run",
        "",
        f"- command: `{command}`",
        f"- date: {machine['date']}",
        f"- machine: `nproc` = {machine['nproc']}; CPU: {machine['cpu']}; Python {machine['python']}; "
        f"{machine['platform']}",
        f"- seed: `{b.seed_path}`",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in b.versions.items()),
        f"- analyze: {'measured' if b.analyze_ok else 'n/a — ' + b.analyze_why}",
        "",
        "`free -h`:",
        "",
        "```",
        machine["free_h"],
        "```",
        "",
        "## Results",
        "",
        "MB = 10^6 bytes of uncompressed JSON (also for the .gz rows); seconds = wall time of a fresh "
        "process, interpreter start and imports included; CPU s = user+sys of the measured process "
        "(its waited-for children included); peak RSS = max(ru_maxrss, polled RSS of the "
        "process tree).",
        "",
        md_table(HEAD, table_rows(b.results)),
        "",
        "### Ratios",
        "",
        md_table(RATIO_HEAD, ratio_rows(b.results)),
        "",
        "### Linearity (seconds per GB of JSON, .json files)",
        "",
    ]
    parts += [f"- {lin_line(*x)}" for x in lin] or ["- not enough sizes"]
    parts += ["", "### Parallel ranks", "", f"- {ranks_line(b.ranks) if b.a.ranks else 'not run (--ranks 0)'}", ""]
    if b.notes:
        parts += ["### Notes", ""] + [f"- {n}" for n in b.notes] + [""]
    return "\n".join(parts)


def report(b: Bench, command: str) -> None:
    machine = machine_info()
    print("\n" + text_table(HEAD, table_rows(b.results)))
    print("\n" + text_table(RATIO_HEAD, ratio_rows(b.results)))
    print("\nlinearity (s per GB of JSON):")
    for x in linearity(b.results):
        print("  " + lin_line(*x))
    if b.a.ranks:
        print(f"\nparallel ranks: {ranks_line(b.ranks)}")
    print("\ntargets:")
    for name, v, d in target_status(b.results, b.ranks):
        print(f"  {name}: {v}" + (f" ({d})" if d else ""))
    if b.a.json:
        Path(b.a.json).write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine,
                    "versions": b.versions,
                    "seed": str(b.seed_path),
                    "results": b.results,
                    "ranks": b.ranks,
                    "analyze": b.analyze_ok or b.analyze_why,
                },
                indent=1,
                default=str,
            )
        )
        print(f"\nraw results: {b.a.json}")
    if b.a.markdown:
        Path(b.a.markdown).write_text(markdown(b, command, machine))
        print(f"markdown: {b.a.markdown}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--task"]:
        return run_task(argv[1], argv[2])
    sys.path.insert(0, str(HERE))
    import generate as gen

    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--sizes", default="100M,500M,1G", help="comma separated (default 100M,500M,1G)")
    ap.add_argument("--gzip", action="store_true", help="also measure the .json.gz twin of each size")
    ap.add_argument("--gzip-level", type=int, default=1, help="gzip level of generated .gz (default 1)")
    ap.add_argument("--ranks", type=int, default=0, help="also compare `analyze DIR` on N rank files to one at a time")
    ap.add_argument("--rank-size", default="100M", help="size of each rank file (default 100M)")
    ap.add_argument(
        "--seq-args",
        default="-j 1",
        help="extra analyze arguments for the single-process rank run (default '-j 1'; '' to skip)",
    )
    ap.add_argument("--skip-hta", action="store_true", help="do not run HolisticTraceAnalysis")
    ap.add_argument(
        "--hta-python",
        help="python of a venv with HolisticTraceAnalysis (default: this python, else /tmp/venv-hta/bin/python)",
    )
    ap.add_argument("--hta-max-size", default="1G", help="skip HTA on files larger than this (default 1G)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"subset of {','.join(TOOLS)}")
    ap.add_argument(
        "--python", default=sys.executable, help="python that runs analyze/msgspec/orjson (default: this one)"
    )
    ap.add_argument("--analyze-args", default="", help="extra arguments for `traceinspect analyze`")
    ap.add_argument("--seed", type=Path, help="seed trace (default: sample_traces/, else a shared trace)")
    ap.add_argument(
        "--out", type=Path, default=Path(gen.DEFAULT_OUT), help=f"where traces go (default {gen.DEFAULT_OUT})"
    )
    ap.add_argument("--regen", action="store_true", help="regenerate traces even if matching ones exist")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement, best time kept (default 1)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before a run is killed (default 900)")
    ap.add_argument(
        "--mem-limit", default=None, help="address-space limit per run, e.g. 16G (default: 80%% of RAM) or 0 for none"
    )
    ap.add_argument("--json", help="save raw results to this file")
    ap.add_argument("--markdown", help="write a results document (e.g. docs/benchmarks.md)")
    a = ap.parse_args(argv)
    a.sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    a.tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    bad = set(a.tools) - set(TOOLS)
    if bad:
        ap.error(f"unknown tools {bad}")
    a.hta_max_bytes = gen.parse_size(a.hta_max_size)
    a.mem_limit = int(0.8 * _total_mem()) if a.mem_limit is None else (gen.parse_size(a.mem_limit) or None)
    a.out = a.out.resolve()
    if str(a.out).startswith(str(REPO_ROOT) + os.sep):
        ap.error("--out must be outside the repository")
    command = "python bench/run.py " + " ".join(shlex.quote(x) for x in argv)
    a.out.mkdir(parents=True, exist_ok=True)
    b = Bench(a)
    try:
        b.run()
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", file=sys.stderr)
    report(b, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
