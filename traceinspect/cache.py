"""A cache of finished reports, so that a second `analyze` or a `diff` of the same large trace is
instant. It never changes a result and never breaks one: any problem reading or writing it is a miss.

Key: the file's size and mtime, a hash of its first and last MiB, the analysis options, and a hash of
traceinspect's own source files, so a new version or a local edit never serves an old report.
Location: $TRACEINSPECT_CACHE_DIR, else $XDG_CACHE_HOME/traceinspect, else ~/.cache/traceinspect.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

MIN_BYTES = 32 << 20      # smaller traces analyse in about a second: not worth a cache entry
_EDGE = 1 << 20


def cache_dir() -> Path:
    d = os.environ.get("TRACEINSPECT_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceinspect"


@lru_cache(maxsize=1)
def _code_hash() -> str:
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parent
    for f in sorted(p for p in pkg.rglob("*") if p.suffix in (".py", ".c")):
        h.update(str(f.relative_to(pkg)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def key_for(path: str | os.PathLike, options: dict) -> str | None:
    try:
        p = Path(path)
        st = p.stat()
        h = hashlib.sha256()
        h.update(json.dumps([st.st_size, st.st_mtime_ns, options, _code_hash()], sort_keys=True).encode())
        with open(p, "rb") as f:
            h.update(f.read(_EDGE))
            if st.st_size > 2 * _EDGE:
                f.seek(st.st_size - _EDGE)
                h.update(f.read(_EDGE))
        return h.hexdigest()
    except OSError:
        return None


def load(key: str | None) -> dict | None:
    if key is None:
        return None
    try:
        return json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def store(key: str | None, report: dict) -> None:
    if key is None:
        return
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(report, default=str), encoding="utf-8")
        os.replace(tmp, d / f"{key}.json")  # atomic: a concurrent reader never sees half a file
    except OSError:
        pass
