"""A directory -> the rank files of one run, checked before any of them is parsed.

Reads only the head of each file (and the tail, where the head does not say which rank it is), never
the events. Raises UsageError when the folder holds several runs; analyses nothing.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError, UsageError
from . import load as _load

HEAD_BYTES = 1 << 20  # Kineto writes distributedInfo before the events: within the first KiBs
TAIL_BYTES = 64 << 10  # metadata written after the events (other writers) sits in the last KiBs
WALK_MAX_DIRS = 2000  # when PATH holds no trace itself: how many folders below it are looked at
WALK_MAX_DEPTH = 4
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
JSON_SUFFIXES = (".json", ".json.gz")

# torch.profiler.tensorboard_trace_handler names each file f"{worker_name}.{ms since epoch}.pt.trace.json"
# (worker_name defaults to f"{hostname}_{pid}") and writes one file per profiling cycle. The worker only
# explains a duplicate rank: a worker_name set by the user may be the same on every rank.
_HANDLER_NAME = re.compile(r"(?P<worker>.+)\.(?P<ms>[0-9]{10,})\.pt\.trace\.json(?:\.gz)?\Z", re.DOTALL)
_DIST_INFO = re.compile(r'"distributedInfo"\s*:\s*')
_EVENTS_KEY = '"traceEvents"'
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class RankFile:
    """What the head and tail of one file say about it, without parsing its events."""

    path: Path
    rank: int  # from distributedInfo, else the file name, else 0 (as the loader assumes)
    rank_source: str  # "distributedInfo" | "file name" | "default"
    world_size: int | None
    worker: str | None  # tensorboard_trace_handler's worker name, when the name has its shape
    problem: str | None = None  # the file could not be sniffed: the loader will say what is wrong
    looks_like_trace: bool = True  # a JSON array, or an object with "traceEvents" in its head

    @property
    def name(self) -> str:
        return self.path.name


def find_trace_files(directory: str | os.PathLike) -> list[Path]:
    """The trace files directly in `directory` (not below it): *.pt.trace.json[.gz]; else any
    *.json[.gz]. Regular files only (a FIFO or a device is never opened)."""
    d = Path(directory)
    try:
        entries = sorted(d.iterdir())
    except OSError as e:
        raise TraceError(
            str(d), f"cannot list the directory ({e.strerror or e})", hint="check the path and its permissions"
        ) from None
    regular = [p for p in entries if _is_regular(p)]
    files = [p for p in regular if p.name.endswith(TRACE_SUFFIXES)]
    return files or [p for p in regular if p.name.endswith(JSON_SUFFIXES)]


def one_run(directory: str | os.PathLike) -> list[RankFile]:
    """The rank files of the one run in `directory`, in rank order.

    UsageError (naming the files) when they are not the ranks of one run: different world sizes, or
    two files with the same rank (say, one tensorboard_trace_handler worker's profiling cycles).
    TraceError when the folder holds no trace file at all."""
    d = Path(directory)
    files = find_trace_files(d)
    if not files:
        return one_run_below(d)
    infos = [sniff(p) for p in files]
    if not files[0].name.endswith(TRACE_SUFFIXES):
        # only generic *.json names: a config or a saved report next to a trace is not a rank
        infos = [i for i in infos if i.looks_like_trace]
        if not infos:
            return one_run_below(d)
    check_one_run([i for i in infos if i.problem is None], str(d))
    return sorted(infos, key=lambda i: (i.problem is not None, i.rank, i.name))


def one_run_below(d: Path) -> list[RankFile]:
    """PATH holds no trace itself: name the folders below it that do, so the user can pick one."""
    runs = _folders_with_traces(d)
    if runs:
        shown = ", ".join(f"{_shown(d, r)}/" for r in runs[:5]) + (
            f" and {len(runs) - 5} more" if len(runs) > 5 else ""
        )
        raise UsageError(
            f"{d}: holds no trace file itself; {len(runs)} folder(s) below it do ({shown})",
            hint=f"pass one run's folder (e.g. {_shown(d, runs[0])}) or one trace file; "
            "rank files are only taken from the folder given",
        )
    raise TraceError(
        str(d),
        "is a directory with no *.pt.trace.json[.gz] or *.json[.gz] trace files",
        hint="pass the directory that tensorboard_trace_handler wrote, or one trace file",
    )


def check_one_run(infos: list[RankFile], where: str) -> None:
    """The one rule for 'these files are the ranks of one run', also applied after the full parse."""
    hint = (
        "pass one run's folder (one trace per rank, all from the same run), or one trace file; "
        "put the traces of each run, or of each profiling cycle, in a folder of their own"
    )
    sizes: dict[int, list[RankFile]] = {}
    for i in infos:
        if i.world_size is not None:
            sizes.setdefault(i.world_size, []).append(i)
    if len(sizes) > 1:
        groups = "; ".join(f"world size {w}: {_names(g)}" for w, g in sorted(sizes.items()))
        raise UsageError(f"{where}: the traces come from different runs ({groups})", hint=hint)
    by_rank: dict[int, list[RankFile]] = {}
    for i in infos:
        by_rank.setdefault(i.rank, []).append(i)
    for rank, group in sorted(by_rank.items()):
        if len(group) < 2:
            continue
        workers = {i.worker for i in group}
        if len(workers) == 1 and None not in workers:
            why = (
                f" (all written by one process, tensorboard_trace_handler worker {next(iter(workers))!r}: "
                "one file per profiling cycle, or one per run)"
            )
        elif {i.rank_source for i in group} == {"default"}:
            why = (
                " (none names its rank: no distributedInfo and no rank in the file name, so each was "
                "assumed to be rank 0)"
            )
        else:
            why = ""
        raise UsageError(f"{where}: {len(group)} files claim rank {rank}{why}: {_names(group)}", hint=hint)


def sniff(path: Path) -> RankFile:
    """Rank, world size and worker name of one file, from its head (and tail if need be)."""
    from .model import _rank

    m = _HANDLER_NAME.match(path.name)
    worker = m.group("worker") if m else None
    try:
        head, gz = _head(path)
        first = head.lstrip()[:1]
        cut = head.find(_EVENTS_KEY)
        looks = first == "[" or (first == "{" and cut >= 0)
        info = _distributed_info(head[:cut] if cut >= 0 else head, last=True) if first == "{" else None
        if first == "{" and (info is None or not looks):
            tail = _tail(path, gz)
            info = info or _distributed_info(tail, last=True)
            looks = looks or _EVENTS_KEY in tail
    except (OSError, ValueError, TraceError, zlib.error, MemoryError) as e:
        return RankFile(path=path, rank=0, rank_source="default", world_size=None, worker=worker, problem=str(e))
    rank, source, world = _rank(_load.Document(distributedInfo=info), str(path), [], False)
    return RankFile(path=path, rank=rank, rank_source=source, world_size=world, worker=worker, looks_like_trace=looks)


def _head(path: Path) -> tuple[str, bool]:
    """Up to HEAD_BYTES of the file's JSON text (gzip inflated, bounded), and whether it is gzip."""
    with _load.open_regular(path) as f:  # a FIFO or device: TraceError, never a blocking open
        raw = f.read(HEAD_BYTES)
        if raw[:2] != _load.GZIP_MAGIC:
            return raw.decode("utf-8", "replace"), False
        d = zlib.decompressobj(wbits=31)
        out = b""
        while raw and len(out) < HEAD_BYTES and not d.eof:
            out += d.decompress(d.unconsumed_tail or raw, HEAD_BYTES - len(out))
            if not d.unconsumed_tail:
                raw = f.read(1 << 16)
        return out.decode("utf-8", "replace"), True


def _tail(path: Path, gz: bool) -> str:
    """The last TAIL_BYTES of the JSON text: a seek for plain files; gzip is inflated to its end
    (only for files whose head names no rank), keeping only the window."""
    if not gz:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode("utf-8", "replace")
    window = b""
    blocks = _load.read_blocks(path, [])
    try:
        for b in blocks:
            window = (window + b)[-TAIL_BYTES:]
    finally:
        blocks.close()
    return window.decode("utf-8", "replace")


def _distributed_info(text: str, *, last: bool) -> dict | None:
    """The object after a "distributedInfo" key in a window of JSON text (the last one: in JSON the
    last duplicate key wins), or None."""
    hits = list(_DIST_INFO.finditer(text))
    for m in reversed(hits) if last else hits:
        try:
            obj, _ = _JSON.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _folders_with_traces(d: Path) -> list[Path]:
    """Folders below d (bounded walk, symlinks not followed) that hold trace files directly."""
    found: list[Path] = []
    todo = [(d, 0)]
    seen = 0
    while todo and seen < WALK_MAX_DIRS:
        cur, depth = todo.pop(0)
        seen += 1
        try:
            with os.scandir(cur) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        if cur != d and any(e.name.endswith(JSON_SUFFIXES) and e.is_file(follow_symlinks=False) for e in entries):
            found.append(Path(cur))
        if depth < WALK_MAX_DEPTH:
            todo += [(Path(e.path), depth + 1) for e in entries if e.is_dir(follow_symlinks=False)]
    return found


def _is_regular(p: Path) -> bool:
    try:
        return stat.S_ISREG(p.stat().st_mode)
    except OSError:
        return False


def _shown(base: Path, p: Path) -> str:
    try:
        return str(p.relative_to(base.parent)) if base.parent != base else str(p)
    except ValueError:
        return str(p)


def _quoted(k) -> str:
    return repr(k) if isinstance(k, str) else str(k)


def _names(group: list[RankFile], most: int = 6) -> str:
    names = [i.name for i in group]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
