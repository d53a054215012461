"""Make large, realistic Kineto traces by repeating the steps of a real trace.

The seed trace's ``traceEvents`` are written k times; copy k has

* every ``ts`` (and ``args["external ts"]``) shifted by ``k * (span of the seed window + gap)``,
* fresh ids: ``args.correlation``, ``args["External id"]`` / ``args["external id"]`` and the flow
  ``id`` of ``ph`` s/f/t events share one offset (so flow id == correlation stays true where the
  seed had it); ``Python id`` / ``Python parent id``, ``Sequence number`` and ``Ev Idx`` get their
  own offsets; only positive integer values are offset (0 / -1 mean "none" in Kineto),
* ``ProfilerStep#N`` renamed to ``ProfilerStep#(N + k * number_of_steps)``,
* metadata events (``ph == "M"``: process/thread names) written once, in copy 0 only.

All top-level keys of the seed are kept (``deviceProperties``, ``baseTimeNanoseconds``, ...) in
their order. The output is written streaming: header, then one copy at a time (one event per
line, serialized with orjson when installed, else json), then the footer, so memory stays at a
few times the seed size whatever the target size. ``--gzip`` also writes a ``.json.gz`` twin
in the same pass (fast compression level, 1 by default).

Usage (from the repository root)::

    python bench/generate.py --size 100M --gzip
    python bench/generate.py --size 500M --seed /path/to/trace.pt.trace.json.gz
    python bench/generate.py --size 100M --ranks 8        # 8 rank files in one directory
    python bench/generate.py --size 2M --ranks 64 --seed DIR   # 64 ranks from a real run's rank files

Files go to ``--out`` (default /tmp/traceinspect-bench), never into the repository. Sizes use
decimal units (1M = 10**6 bytes, 1G = 10**9 bytes); the file ends within half a seed copy of
the target. A hidden ``.<file>.meta`` sidecar records seed, copies and sizes so that ``run.py``
can reuse files that match.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import sys
import time
from pathlib import Path

try:  # orjson is ~5x faster to serialize; json works too
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

GENERATOR_VERSION = 2  # 2: rank files get their own clocks and one copy count
GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_OUT = "/tmp/traceinspect-bench"
REPO_ROOT = Path(__file__).resolve().parent.parent
GAP_US = 1000  # gap between two copies, in µs

# Seeds named in the project brief, preferred in this order when sample_traces/ has none.
PREFERRED_SHARED = [
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "AMD-AGI__TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]

# id groups: keys in one group share one offset per copy
ID_GROUP_CORR = "corr"  # correlation, External id, external id, flow id
ARG_ID_GROUPS = {
    "correlation": ID_GROUP_CORR,
    "External id": ID_GROUP_CORR,
    "external id": ID_GROUP_CORR,
    "Python id": "py",
    "Python parent id": "py",
    "Sequence number": "seq",
    "Ev Idx": "evidx",
}
FLOW_PHASES = ("s", "f", "t")
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)[bB]?\s*$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def parse_size(text: str) -> int:
    """'100M' -> 100_000_000 (decimal units)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad size {text!r}: use e.g. 100M, 500M, 1G")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def size_label(nbytes: int) -> str:
    for unit, mult in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if nbytes >= mult and nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    return str(nbytes)


def _dumps(obj) -> bytes:
    if _orjson is not None:
        return _orjson.dumps(obj)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(data: bytes):
    if _orjson is not None:
        return _orjson.loads(data)
    return json.loads(data)


def read_trace_bytes(path: str | os.PathLike) -> bytes:
    """File bytes, gunzipped when they start with the gzip magic (whatever the extension)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    return data


def shared_traces_dir() -> Path | None:
    for cand in (REPO_ROOT.parent / "shared" / "traces", Path("/work/shared/traces")):
        if cand.is_dir():
            return cand
    return None


def _looks_like_trace(p: Path) -> bool:
    n = p.name
    return p.is_file() and (n.endswith(".json") or n.endswith(".json.gz"))


def default_seed() -> Path:
    """A real GPU trace: from sample_traces/ when it has one, else from the shared traces.

    Order: sample_traces/ files with GPU kernels that are not synthetic (largest first), then
    PREFERRED_SHARED, then the first shared trace with kernels, then any sample with events.
    """
    samples = REPO_ROOT / "sample_traces"
    cands = (
        sorted((p for p in samples.rglob("*") if _looks_like_trace(p)), key=lambda p: -p.stat().st_size)
        if samples.is_dir()
        else []
    )
    for p in cands:
        if not p.name.startswith("synthetic") and _kernel_count(p) > 0:
            return p
    shared = shared_traces_dir()
    if shared is not None:
        for rel in PREFERRED_SHARED:
            if (shared / rel).is_file():
                return shared / rel
        for p in sorted(p for p in shared.rglob("*") if _looks_like_trace(p)):
            if p.stat().st_size > 50_000 and _kernel_count(p) > 0:
                return p
    for p in cands:
        if _kernel_count(p) >= 0:
            return p
    raise SystemExit("no seed trace found: pass --seed PATH")


def _kernel_count(p: Path) -> int:
    """GPU kernel events in a trace; -1 if it is not a readable trace with events."""
    try:
        doc = _loads(read_trace_bytes(p))
    except Exception:
        return -1
    if not isinstance(doc, dict) or not doc.get("traceEvents"):
        return -1
    return sum(1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "Kernel"))


class Seed:
    """The parsed seed and everything needed to write shifted copies of it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        doc = _loads(read_trace_bytes(self.path))
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise SystemExit(f"{self.path}: not a Kineto trace (no traceEvents list)")
        keys = list(doc)
        i = keys.index("traceEvents")
        self.head = {k: doc[k] for k in keys[:i]}
        self.tail = {k: doc[k] for k in keys[i + 1 :]}
        base = doc.get("baseTimeNanoseconds")
        self.base_us = base // 1000 if isinstance(base, int) and not isinstance(base, bool) else 0
        events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
        self.meta_events = [e for e in events if e.get("ph") == "M"]
        self.events = [e for e in events if e.get("ph") != "M"]
        self.n_events = len(events)

        t0, t1, any_float = math.inf, -math.inf, False
        maxid: dict[str, int] = {}
        steps: list[int] = []
        for e in self.events:
            ts = e.get("ts")
            if isinstance(ts, (int, float)) and not isinstance(ts, bool):
                any_float |= isinstance(ts, float)
                dur = e.get("dur")
                end = ts + dur if isinstance(dur, (int, float)) and dur > 0 else ts
                t0 = min(t0, ts)
                t1 = max(t1, end)
            if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
                maxid[ID_GROUP_CORR] = max(maxid.get(ID_GROUP_CORR, 0), e["id"])
            args = e.get("args")
            if isinstance(args, dict):
                for k, g in ARG_ID_GROUPS.items():
                    v = args.get(k)
                    if isinstance(v, int) and not isinstance(v, bool):
                        maxid[g] = max(maxid.get(g, 0), v)
            m = STEP_RE.match(e.get("name") or "") if isinstance(e.get("name"), str) else None
            if m:
                steps.append(int(m.group(1)))
        if t0 is math.inf:
            raise SystemExit(f"{self.path}: no timestamped events")
        self.t0, self.t1 = t0, t1
        self.fractional = any_float
        # integer shift keeps integer-µs traces integer and fractional parts unchanged
        self.period = int(math.ceil(t1 - t0)) + GAP_US
        self.id_stride = {g: v + 1 for g, v in maxid.items()}
        self.step_stride = (max(steps) - min(steps) + 1) if steps else 0
        self.n_steps = len(set(steps))

    # ------------------------------------------------------------------ copies
    def copy_events(self, k: int, extra_shift: int = 0) -> list:
        """Events of copy k (metadata events only in copy 0)."""
        shift = k * self.period + extra_shift
        if shift == 0 and k == 0:
            return self.meta_events + self.events
        id_off = {g: k * s for g, s in self.id_stride.items()}
        corr_off = id_off.get(ID_GROUP_CORR, 0)
        step_off = k * self.step_stride
        src = self.meta_events + self.events if k == 0 else self.events
        return [self._shift_one(e, shift, id_off, corr_off, step_off) for e in src]

    @staticmethod
    def _shift_one(e: dict, shift: int, id_off: dict, corr_off: int, step_off: int) -> dict:
        e = dict(e)
        ts = e.get("ts")
        if ts.__class__ is int:
            e["ts"] = ts + shift
        elif ts.__class__ is float:
            e["ts"] = round(ts + shift, 3)
        if corr_off and e.get("ph") in FLOW_PHASES:
            fid = e.get("id")
            if fid.__class__ is int and fid > 0:
                e["id"] = fid + corr_off
        if step_off:
            name = e.get("name")
            if name.__class__ is str and name.startswith("ProfilerStep#"):
                m = STEP_RE.match(name)
                if m:
                    e["name"] = f"ProfilerStep#{int(m.group(1)) + step_off}"
        args = e.get("args")
        if args.__class__ is dict and args:
            args = dict(args)
            for k, v in args.items():
                g = ARG_ID_GROUPS.get(k)
                if g is not None:
                    if v.__class__ is int and v > 0 and g in id_off:
                        args[k] = v + id_off[g]
                elif k == "external ts":
                    if v.__class__ is int:
                        args[k] = v + shift
                    elif v.__class__ is float:
                        args[k] = round(v + shift, 3)
            e["args"] = args
        return e

    def chunk(self, k: int, extra_shift: int = 0) -> bytes:
        """Serialized events of copy k: one event per line, comma separated, no brackets."""
        return b",\n".join(_dumps(e) for e in self.copy_events(k, extra_shift))


def _header_footer(seed: Seed, distributed: dict | None, base_time_ns: int | None = None) -> tuple[bytes, bytes]:
    head = dict(seed.head)
    tail = dict(seed.tail)
    if base_time_ns is not None:
        tail.pop("baseTimeNanoseconds", None)
        head["baseTimeNanoseconds"] = base_time_ns  # Kineto writes it just before traceEvents
    if distributed is not None:
        tail.pop("distributedInfo", None)
        head.pop("distributedInfo", None)
        kv = list(head.items())
        # Kineto writes distributedInfo near the top (HTA scans lines for '"rank": N')
        pos = 1 if kv and kv[0][0] == "schemaVersion" else 0
        kv.insert(pos, ("distributedInfo", distributed))
        head = dict(kv)

    # json's ", " / ": " separators like Kineto; HTA's rank regex needs the space after ':'
    def items(d: dict) -> list[str]:
        return [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in d.items()]

    header = "{\n" + "".join(x + ",\n" for x in items(head)) + '  "traceEvents": [\n'
    footer = "\n  ]" + "".join(",\n" + x for x in items(tail)) + "\n}"
    return header.encode(), (footer + "\n").encode()


class _Sinks:
    def __init__(self, paths: list[tuple[Path, int | None]]):
        self.files = []
        for p, level in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + ".part")
            raw = open(tmp, "wb")
            f = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) if level else raw
            self.files.append((p, tmp, raw, f))

    def write(self, b: bytes) -> None:
        for _, _, _, f in self.files:
            f.write(b)

    def close(self) -> None:
        for p, tmp, raw, f in self.files:
            if f is not raw:
                f.close()
            raw.close()
            os.replace(tmp, p)


def write_trace(
    seed: Seed,
    target_bytes: int,
    out_json: Path | None,
    out_gz: Path | None = None,
    gzip_level: int = 1,
    distributed: dict | None = None,
    extra_shift: int = 0,
    copies: int | None = None,
    base_time_ns: int | None = None,
) -> dict:
    """Write copies of the seed until the file is within half a copy of target_bytes (or, given
    `copies`, that many); base_time_ns replaces the seed's baseTimeNanoseconds."""
    n_copies = copies
    sinks = []
    if out_json is not None:
        sinks.append((out_json, None))
    if out_gz is not None:
        sinks.append((out_gz, gzip_level))
    s = _Sinks(sinks)
    t = time.perf_counter()
    header, footer = _header_footer(seed, distributed, base_time_ns)
    s.write(header)
    written = len(header) + len(footer)
    copies = 0
    last_len = None
    while True:
        b = seed.chunk(copies, extra_shift)
        if copies:
            b = b",\n" + b
        s.write(b)
        written += len(b)
        last_len = len(b)
        copies += 1
        if (copies >= n_copies) if n_copies else (written + last_len / 2 >= target_bytes):
            break
    s.write(footer)
    s.close()
    info = {
        "generator_version": GENERATOR_VERSION,
        "seed": str(seed.path),
        "seed_events": seed.n_events,
        "target_bytes": target_bytes,
        "copies": copies,
        "json_bytes": written,
        "events": len(seed.meta_events) + copies * len(seed.events),
        "profiler_steps": copies * seed.n_steps,
        "distributedInfo": distributed,
        "gzip_level": gzip_level if out_gz is not None else None,
        "seconds": round(time.perf_counter() - t, 2),
    }
    for p in (out_json, out_gz):
        if p is not None:
            meta = dict(info, path=str(p), file_bytes=p.stat().st_size, gzip=p.name.endswith(".gz"))
            meta_path(p).write_text(json.dumps(meta, indent=1))
    return info


def meta_path(path: Path) -> Path:
    """Hidden sidecar `.NAME.meta` (not *.json / *.gz, so trace-directory scans skip it)."""
    return path.with_name(f".{path.name}.meta")


def read_meta(path: Path) -> dict | None:
    try:
        return json.loads(meta_path(path).read_text())
    except (OSError, ValueError):
        return None


def _fresh(path: Path, seed_path: Path, target: int) -> bool:
    m = read_meta(path)
    return bool(
        m
        and path.is_file()
        and m.get("generator_version") == GENERATOR_VERSION
        and m.get("seed") == str(seed_path)
        and m.get("target_bytes") == target
        and m.get("file_bytes") == path.stat().st_size
    )


def trace_paths(out: Path, seed: Path, size: int) -> tuple[Path, Path]:
    stem = seed.name.split(".")[0][:40]
    base = out / f"{stem}-{size_label(size)}.pt.trace.json"
    return base, Path(str(base) + ".gz")


def ensure_trace(
    out: Path,
    seed_path: Path,
    size: int,
    want_gz: bool,
    gzip_level: int = 1,
    force: bool = False,
    seed: Seed | None = None,
    log=print,
) -> tuple[Path, Path | None]:
    """Generate (or reuse) the single-file trace of `size` bytes; returns (json, gz or None)."""
    pj, pg = trace_paths(out, seed_path, size)
    need_j = force or not _fresh(pj, seed_path, size)
    need_g = want_gz and (force or not _fresh(pg, seed_path, size))
    if need_j or need_g:
        seed = seed or Seed(seed_path)
        info = write_trace(seed, size, pj if need_j else None, pg if need_g else None, gzip_level)
        log(
            f"generated {pj.name}{' + .gz' if need_g else ''}: {info['json_bytes'] / 1e6:.0f} MB, "
            f"{info['copies']} copies, {info['events']} events in {info['seconds']} s"
        )
    return pj, (pg if want_gz else None)


RANKS_PER_HOST = 8  # ranks that share one host, and so one clock
BASE_EPOCH_S = 1_700_000_000  # baseTimeNanoseconds of rank 0 when the seed has neither a base nor epoch ts


def rank_seeds(seed_path: Path) -> list[Path]:
    """A seed file, or a directory holding a real run's rank files: those, in rank order (the
    distributedInfo rank where a file has one, else the file name)."""
    if not seed_path.is_dir():
        return [seed_path]
    files = sorted(p for p in seed_path.iterdir() if _looks_like_trace(p))
    if not files:
        raise SystemExit(f"{seed_path}: no trace files (*.json, *.json.gz) in the seed directory")

    def rank_of(p: Path):
        m = re.search(rb'"rank"\s*:\s*(\d+)', read_trace_bytes(p)[:65536])
        return (0, int(m.group(1)), p.name) if m else (1, 0, p.name)

    return sorted(files, key=rank_of)


def rank_clocks(r: int, seed: Seed, per_host: int = RANKS_PER_HOST) -> tuple[int, int]:
    """Rank r's two clock offsets: (its host's clock offset in us, its baseTimeNanoseconds).

    The ranks of one host share a clock; each host's differs by a few ms (0 on host 0), drawn from
    a generator seeded by the host's number. Each rank's process has its own baseTimeNanoseconds
    (Kineto since #910 writes ts relative to it): rank r's process started r s before rank 0's, so
    its ts are r * 10**6 us larger. The absolute time (base + ts) is the host's clock."""
    import random

    h = r // per_host
    host_us = 0 if h == 0 else int(random.Random(f"host{h}").uniform(-20_000, 20_000))
    t0_s = int((seed.base_us + seed.t0) // 10**6) if (seed.base_us or seed.t0 > 10**12) else BASE_EPOCH_S
    return host_us, (t0_s - r) * 10**9


def ensure_ranks(
    out: Path, seed_path: Path, size: int, ranks: int, force: bool = False, seed: Seed | None = None, log=print
) -> Path:
    """A directory with `ranks` files rank{r}.pt.trace.json of about `size` bytes each.

    seed_path is one trace, or a directory of a real run's rank files: rank r is then made from the
    seed rank r mod (number of seed ranks), so the ranks keep the real run's differences. Every rank
    gets the same number of copies (so the k-th collective of each communicator exists on every rank),
    its host's clock offset and its own baseTimeNanoseconds (rank_clocks)."""
    seeds = rank_seeds(seed_path)
    label = seed_path.name.split(".")[0][:40]
    d = out / f"ranks{ranks}-{label}-{size_label(size)}"
    d.mkdir(parents=True, exist_ok=True)
    loaded: dict[int, Seed] = {}
    if seed is not None and len(seeds) == 1:
        loaded[0] = seed

    def get(i: int) -> Seed:
        if i not in loaded:
            loaded[i] = Seed(seeds[i])
        return loaded[i]

    copies = None
    # one period for every rank (the longest seed's): copy k of each rank is shifted by the same time,
    # so the run's ranks stay in step copy after copy
    period = max(get(i).period for i in range(min(len(seeds), ranks)))
    for i in loaded:
        loaded[i].period = period
    for r in range(ranks):
        i = r % len(seeds)
        p = d / f"rank{r}.pt.trace.json"
        m = read_meta(p)
        if (
            not force
            and _fresh(p, seeds[i], size)
            and m
            and (m.get("distributedInfo") or {}).get("world_size") == ranks
            and m.get("generator_version") == GENERATOR_VERSION
        ):
            continue
        if copies is None:  # from seed rank 0, the same for every rank
            s0 = get(0)
            copies = max(1, round(size / max(len(s0.chunk(0)) + 2, 1)))
        s = get(i)
        host_us, base_ns = rank_clocks(r, s)
        dist = {"rank": r, "world_size": ranks, "backend": "nccl"}
        shift = host_us + int(s.base_us) - base_ns // 1000
        info = write_trace(s, size, p, None, distributed=dist, extra_shift=shift, copies=copies, base_time_ns=base_ns)
        log(f"generated {d.name}/{p.name}: {info['json_bytes'] / 1e6:.1f} MB in {info['seconds']} s")
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seed",
        type=Path,
        help="seed trace (.json or .json.gz), or with --ranks a directory of a run's rank files; "
        "default: sample_traces/ or shared traces",
    )
    ap.add_argument("--size", default="100M", help="target uncompressed size: 100M, 500M, 1G (default 100M)")
    ap.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--gzip", action="store_true", help="also write a .json.gz twin")
    ap.add_argument(
        "--gzip-level",
        type=int,
        default=1,
        choices=range(1, 10),
        metavar="1-9",
        help="gzip level (default 1; 1-3 keep generation fast)",
    )
    ap.add_argument("--ranks", type=int, default=0, help="write N rank files (distributedInfo set) into one directory")
    ap.add_argument("--force", action="store_true", help="regenerate even if a matching file exists")
    a = ap.parse_args(argv)
    out = a.out.resolve()
    if str(out).startswith(str(REPO_ROOT) + os.sep) or out == REPO_ROOT:
        raise SystemExit(f"--out {out} is inside the repository; pick a directory outside it")
    seed_path = (a.seed or default_seed()).resolve()
    size = parse_size(a.size)
    print(f"seed: {seed_path}", file=sys.stderr)
    if a.ranks:
        d = ensure_ranks(out, seed_path, size, a.ranks, force=a.force)
        print(d)
    else:
        pj, pg = ensure_trace(out, seed_path, size, a.gzip, a.gzip_level, force=a.force)
        print(pj)
        if pg:
            print(pg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
