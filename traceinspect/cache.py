"""A cache of finished reports, so that a second `analyze` or a `diff` of the same large trace is
instant. It never changes a result and never breaks one: any problem reading or writing it is a miss.
It must not trust what it reads back: an entry is untrusted input, like a trace.

Key: a SHA-256 of the file's whole content, with the analysis options and a hash of traceinspect's
own source files (a new version or a local edit never serves an old report). The trade-off: hashing
reads the whole file once more: 0.71 s for a 514 MB JSON trace and 0.04 s for its 28 MB gzip, against
6.8 s and 7.4 s to parse and analyse it on the same busy 2-core VM (docs/benchmarks.md, 'Report
cache'); a hit stays about 3x faster than a parse. A sample (size, mtime, first and last MiB) cost
nothing but served a stale report for a file edited in place with the same size and mtime; any
sample misses some edit. SHA-256 over BLAKE2b: 1.25 GB/s against 0.53 GB/s here (CPU instructions).
The cache is used only for traces of MIN_BYTES of JSON or more, where a hit pays for the hash.

Protections (docs/security.md):
- the directory is created 0700; an existing one that is not a directory, not owned by this user, or
  writable by group or others is not used (every lookup is a miss, nothing is written);
- entries are written to a fresh `tempfile.mkstemp` file (O_EXCL, mode 0600, random name) in that
  directory and renamed over the entry; a symlink planted at any name is never followed or written;
- entries are opened with O_NOFOLLOW|O_NONBLOCK and used only if they are a regular file owned by this
  user and at most MAX_ENTRY_BYTES (a FIFO, a device or a symlink is a miss, and never blocks);
- an entry holds its own key and the report; a different key, invalid JSON, or a report of the wrong
  shape or types (Report.from_dict checks every key the renderers read) is a miss.
Location: $TRACEINSPECT_CACHE_DIR, else $XDG_CACHE_HOME/traceinspect, else ~/.cache/traceinspect.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from functools import lru_cache
from pathlib import Path

MIN_BYTES = 32 << 20  # smaller traces analyse in about a second: not worth a cache entry
MAX_ENTRY_BYTES = 64 << 20  # a report is KiBs to a few MiB; anything larger is not ours
ENTRY_FORMAT = 1
_READ = 1 << 20
# POSIX flags; where a platform lacks one (Windows) the check it serves is skipped
_OPEN_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _mine(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() if hasattr(os, "geteuid") else True


def cache_dir() -> Path:
    d = os.environ.get("TRACEINSPECT_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceinspect"


def _usable_dir(create: bool) -> Path | None:
    """The cache directory if only this user can change it (created 0700 when asked), else None."""
    d = cache_dir()
    try:
        if create:
            d.parent.mkdir(parents=True, exist_ok=True)
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                pass
        st = os.stat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not _mine(st) or st.st_mode & 0o022:
        return None
    return d


@lru_cache(maxsize=1)
def _code_hash() -> str:
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parent
    for f in sorted(p for p in pkg.rglob("*") if p.suffix in (".py", ".c")):
        h.update(str(f.relative_to(pkg)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def key_for(path: str | os.PathLike, options: dict) -> str | None:
    """SHA-256 over the options, traceinspect's code and every byte of the file; None if the file
    cannot be read as a regular file."""
    try:
        fd = os.open(path, _OPEN_READ)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            h = hashlib.sha256()
            h.update(json.dumps([options, _code_hash()], sort_keys=True, default=str).encode())
            buf = bytearray(_READ)
            view = memoryview(buf)
            while n := f.readinto(buf):
                h.update(view[:n])
        return h.hexdigest()
    except OSError:
        return None


def load(key: str | None):
    """The cached Report for `key`, or None (a miss) for anything but a well-formed entry of ours."""
    from .report import Report

    if key is None:
        return None
    d = _usable_dir(create=False)
    if d is None:
        return None
    try:
        fd = os.open(d / f"{key}.json", _OPEN_READ | _NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _mine(st) or st.st_size > MAX_ENTRY_BYTES:
                return None
            data = f.read(MAX_ENTRY_BYTES + 1)
        entry = json.loads(data)
        if (
            not isinstance(entry, dict)
            or entry.get("format") != ENTRY_FORMAT
            or entry.get("key") != key
            or not isinstance(entry.get("report"), dict)
        ):
            return None
        return Report.from_dict(entry["report"])
    except (OSError, ValueError, RecursionError, MemoryError):
        return None


def store(key: str | None, report: dict) -> None:
    if key is None:
        return
    d = _usable_dir(create=True)
    if d is None:
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".entry-", suffix=".tmp")  # O_EXCL, 0600, random name
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": ENTRY_FORMAT, "key": key, "report": report}, f, default=str)
        os.replace(tmp, d / f"{key}.json")  # atomic, and replaces a planted symlink instead of following it
        tmp = None
    except (OSError, ValueError, TypeError):
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
