"""Streaming load: read (and gunzip) a trace in blocks, cut the traceEvents array into chunks at event
boundaries, and decode + columnise each chunk on its own, optionally in worker processes.

Peak memory stays near the size of the tables plus a few chunks instead of the whole file plus one
Python object per event; gzip decompression runs in a reader thread (zlib releases the GIL) so it
overlaps with parsing. Anything this path cannot handle cleanly (a false boundary, a truncated or
malformed tail, fields of unexpected types) falls back to load.decode's careful whole-buffer logic
on the affected piece only, so the result is the same as the whole-file path.
"""
from __future__ import annotations

import gc
import os
import queue
import re
import threading
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import msgspec

from ..errors import TraceError
from . import load as L
from .tables import extract, extract_scanned

try:  # the optional native scanner (setup.py builds it where a C compiler exists)
    from . import _scan
except ImportError:  # pragma: no cover - depends on the install
    _scan = None


def native_enabled() -> bool:
    """True when chunks are decoded by the native scanner (TRACEINSPECT_NATIVE=0 turns it off)."""
    return _scan is not None and os.environ.get("TRACEINSPECT_NATIVE", "1") != "0"

CHUNK_BYTES = 24 << 20         # events decoded per chunk
# `}, {"`: the quote after the brace cannot occur unescaped inside a JSON string, so this only matches
# between objects (between events, or rarely between objects nested in one event's args: then the
# chunk fails to parse and the file is read in one piece)
_BOUNDARY = re.compile(rb'\}\s*,\s*\{\s*"')
_KEY = b'"traceEvents"'


def _threaded(gen: Iterator[bytes], depth: int = 3) -> Iterator[bytes]:
    """Run a block generator in a thread so decompression overlaps with parsing. Closing this
    generator (or dropping it) stops the thread, so an early return leaks nothing."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    SENTINEL = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run():
        try:
            for b in gen:
                if not put(b):
                    return
        except BaseException as e:  # handed to the consumer
            put(e)
        finally:
            gen.close()
        put(SENTINEL)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is SENTINEL:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _parse_chunk(data) -> dict:
    """One JSON array of complete events (bytes or a memoryview) -> extracted columns."""
    was = gc.isenabled()
    gc.disable()
    try:
        if native_enabled():
            part = _native_chunk(data)
            if part is not None:
                return part
        if L.nesting_error(data, L.MAX_NESTING - 1) is not None:
            # the chunk sits one level inside the document: the whole-file path measures it exactly
            return {"error": "nested too deeply"}
        try:
            events = L._LIST_DECODER.decode(data)
            dropped = partial = 0
        except msgspec.DecodeError as e:
            if not isinstance(e, msgspec.ValidationError):
                return {"error": str(e)}  # a false boundary, or corruption: the caller starts over
            try:
                _, events, dropped, partial = L._decode_lenient("", bytes(data), True, [])
            except msgspec.DecodeError as e2:
                return {"error": str(e2)}
        part = extract(events)
        del events  # releases the views into the caller's buffer before it is resized
        part["dropped"] = dropped
        part["partial"] = partial   # events kept without the fields that did not fit
        return part
    finally:
        if was:
            gc.enable()


def _native_chunk(data, whole: bool = True) -> dict | None:
    """The native scanner's columns for one chunk (a JSON array; with whole=False, an array followed
    by anything, whose end offset is returned as part["end"]), or None where it defers to the
    Python path (anything it is not sure about: see _scan.c)."""
    scanned = _scan.scan(data)
    if scanned is None or (whole and scanned[1] != len(data)):
        return None
    try:
        part = extract_scanned(scanned)
    except (UnicodeDecodeError, msgspec.DecodeError, OverflowError, ValueError, TypeError):
        return None  # a value the columns cannot hold: the Python path decides
    if not whole:
        part["end"] = scanned[1]
    return part


def load_streaming(path: str | os.PathLike, jobs: int = 1, progress=None) -> L.Loaded:
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), "no such file or directory", hint="check the path")
    if p.is_dir():
        raise TraceError(str(p), "is a directory", hint="pass one trace file, or use the CLI on the directory")
    size = p.stat().st_size
    if size == 0:
        raise TraceError(str(p), "the file is empty (0 bytes)",
                         hint="the profiler probably crashed before writing; capture the trace again")
    warnings: list[str] = []
    blocks = _threaded(L.read_blocks(p, warnings, progress))
    try:
        return _load(p, size, blocks, warnings, jobs)
    finally:
        blocks.close()  # stops the reader thread on every exit path


def _load(p: Path, size: int, blocks, warnings: list[str], jobs: int) -> L.Loaded:
    head = bytearray()
    json_bytes = 0
    # 1. find the start of the events array; small or odd files take the whole-buffer path
    start = None
    for b in blocks:
        head += b
        json_bytes += len(b)
        start = _events_start(head)
        if start is not None or len(head) > (64 << 20):
            break
    deep = L.nesting_error(head)
    if deep is not None:  # in the blocks read to find the events array: the first violation
        raise L._too_deep(str(p), deep)
    if start is None:
        for b in blocks:
            head += b
            json_bytes += len(b)
        return L.decode(str(p), bytes(head), size, warnings)
    head_end, head_doc = start
    is_array = head_doc is None
    # buf[0] is a spare byte that becomes the '[' of the first chunk; chunks are decoded in place:
    # the separator before a chunk is overwritten with '[' and the one after it with ']'
    buf = bytearray(b" ") + head[head_end:]
    del head

    pool, workers = _chunk_pool(jobs)
    pending: list[Future | dict] = []
    dropped = 0
    try:
        eof = False
        want = CHUNK_BYTES
        while not eof:
            while len(buf) < want:
                b = next(blocks, None)
                if b is None:
                    eof = True
                    break
                buf += b
                json_bytes += len(b)
            if eof:
                break
            cut = _last_boundary(buf)
            if cut is None:
                _too_deep_so_far(p, buf, json_bytes, is_array, pending)
                want = len(buf) + CHUNK_BYTES  # no boundary yet (one enormous event?): read more
                continue
            want = CHUNK_BYTES
            end, rest = cut
            buf[0] = 0x5B   # '['
            buf[end] = 0x5D  # ']' over the separator after the chunk's last event
            if pool is None:
                with memoryview(buf) as mv:
                    pending.append(_parse_chunk(mv[: end + 1]))
                del buf[: rest - 1]  # keep one byte before the next event for its '['
                continue
            if isinstance(pool, ThreadPoolExecutor):
                # the chunk's buffer is handed over as it is (no copy) and never touched again
                chunk = memoryview(buf)[: end + 1]
            else:
                chunk = bytes(buf[: end + 1])
            pending.append(pool.submit(_parse_chunk, chunk))
            buf = bytearray(1) + buf[rest:]  # one spare byte before the next event for its '['
            if len(pending) > workers + 1:  # bound the chunks in flight
                _wait_oldest(pending)
        # 2. the tail: last events, the closing bracket and the trailing metadata keys
        parts = [f.result() if isinstance(f, Future) else f for f in pending]
        if any("error" in part for part in parts):
            # an event boundary was misread (or the middle of the file is corrupt): the whole-buffer
            # path parses the file in one piece and reports any real error precisely
            return L.load_file(p)
        last = _native_tail(p, buf, is_array, size, warnings)
        if last is None:
            keys = None if is_array else L.top_level_keys(b'{"":[' + bytes(buf[1:]))
            if keys is not None and "traceEvents" in keys:
                return L.load_file(p)  # a second "traceEvents" follows: its array wins, as in one piece
            prefix = b"[" if is_array else b'{"traceEvents":['
            tail = prefix + bytes(buf[1:])
            origin = json_bytes - (len(buf) - 1) - len(prefix)   # where tail[0] would sit in the file
            del buf
            last = L.decode(str(p), tail, size, warnings, origin=origin)
            last.partials = [extract(last.events)]
            last.top_keys = keys
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    parts += last.partials
    partial = 0
    for part in parts:
        dropped += part.pop("dropped", 0)
        partial += part.pop("partial", 0)
    doc = head_doc if head_doc is not None else L.Document()
    for k in L.Document.__struct_fields__:
        v = getattr(last.doc, k)
        # the last occurrence wins, an explicit null in the tail too
        if k != "traceEvents" and (v is not None or (last.top_keys is not None and k in last.top_keys)):
            setattr(doc, k, v)
    L.note_dropped(warnings, dropped)
    L.note_partial(warnings, partial)
    lost = last.lost_bytes
    loaded = L.Loaded(path=str(p), events=[], doc=doc, file_bytes=size, json_bytes=json_bytes,
                      warnings=last.warnings, lost_bytes=lost, dropped_events=dropped + last.dropped_events)
    loaded.partials = parts
    return loaded


def _too_deep_so_far(p: Path, buf: bytearray, json_bytes: int, is_array: bool, pending: list) -> None:
    """Raise the nesting error as soon as one unfinished event is deeper than the limit (megabytes
    of '[' fail after one chunk, not after reading the file). buf starts at an event boundary, one
    level inside the document for a bare array, two inside an object. Only where no earlier chunk
    failed: that chunk may hold an earlier violation, which the whole-file path reports."""
    if len(buf) < CHUNK_BYTES or (len(buf) // CHUNK_BYTES) & (len(buf) // CHUNK_BYTES - 1):
        return  # measured at 1, 2, 4, ... chunks: linear in all
    deep = L.nesting_error(buf, L.MAX_NESTING - (1 if is_array else 2))
    if deep is None:
        return
    if any("error" in (f.result() if isinstance(f, Future) else f) for f in pending):
        return
    raise L._too_deep(str(p), json_bytes - len(buf) + deep)


def _chunk_pool(jobs: int) -> tuple[Executor | None, int]:
    """Where chunks are decoded: inline for jobs <= 1; else `jobs` threads with the native scanner
    (it parses without the GIL, and chunks need no copying), or `jobs` worker processes for the
    Python decoder (which holds the GIL)."""
    if jobs <= 1:
        return None, 1
    if native_enabled():
        return ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="traceinspect-scan"), jobs
    return ProcessPoolExecutor(max_workers=jobs), jobs


def _native_tail(p: Path, buf: bytearray, is_array: bool, size: int, warnings: list[str]) -> L.Loaded | None:
    """The last events (buf[1:] up to the array's closing bracket) by the native scanner, and the
    top-level keys after it by msgspec; None where the Python path must decide (a truncated or
    malformed tail, metadata of unexpected types)."""
    if not native_enabled():
        return None
    buf[0] = 0x5B  # '['
    with memoryview(buf) as mv:
        part = _native_chunk(mv, whole=False)
    if part is None:
        return None
    rest = bytes(buf[part.pop("end"):])
    try:
        if is_array:
            if rest.strip():
                return None
            doc = L.Document()
        else:
            obj = b'{"":0' + rest
            keys = L.top_level_keys(obj)
            if keys is None or "traceEvents" in keys or L.nesting_error(obj) is not None:
                return None  # the Python path reports the problem, or takes the later events array
            doc = L._DOC_DECODER.decode(b'{"traceEvents":[]' + rest)
    except (msgspec.DecodeError, RecursionError):
        return None
    loaded = L.Loaded(path=str(p), events=[], doc=doc, file_bytes=size, json_bytes=len(buf),
                      warnings=warnings, dropped_events=0, top_keys=None if is_array else keys)
    loaded.partials = [part]
    return loaded


def _wait_oldest(pending: list) -> None:
    for i, f in enumerate(pending):
        if isinstance(f, Future):
            pending[i] = f.result()
            return


def _events_start(buf: bytes):
    """(offset just after '[' of the events array, header Document or None for a bare array), or None."""
    s = buf.lstrip()
    if not s:
        return None
    lead = len(buf) - len(s)
    if s[:1] == b"[":
        return lead + 1, None
    if s[:1] != b"{":
        return None
    k = buf.find(_KEY)
    if k < 0:
        return None
    m = re.compile(rb"\s*:\s*\[").match(buf, k + len(_KEY))
    if not m:
        return None
    head = buf[:k].rstrip()
    if head.endswith(b","):
        head = head[:-1]
    if L.nesting_error(head) is not None:
        return None  # the whole-buffer path reports it
    try:
        doc = L._DOC_DECODER.decode(head + b"}")
    except (msgspec.DecodeError, RecursionError):
        return None
    return m.end(), doc


def _last_boundary(buf: bytes):
    """(end of the chunk, start of the rest) at the last `}, {` between events, or None. Looks at
    a short tail window first and widens it only when the window holds no boundary."""
    window = 64 << 10
    while True:
        lo = max(0, len(buf) - window)
        m = None
        for m in _BOUNDARY.finditer(buf, lo):
            pass
        if m is not None:
            brace = buf.rindex(b"{", m.start(), m.end())
            return m.start() + 1, brace
        if lo == 0:
            return None
        window *= 4
