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
from .tables import extract_events, extract_scanned

try:  # the optional native scanner (setup.py builds it where a C compiler exists)
    from . import _scan
except ImportError:  # pragma: no cover - depends on the install
    _scan = None


def native_enabled() -> bool:
    """True when chunks are decoded by the native scanner (TRACEINSPECT_NATIVE=0 turns it off)."""
    return _scan is not None and os.environ.get("TRACEINSPECT_NATIVE", "1") != "0"


CHUNK_BYTES = 24 << 20  # events decoded per chunk
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
        part = extract_events(events)
        del events  # releases the views into the caller's buffer before it is resized
        part["dropped"] = dropped
        part["partial"] = partial  # events kept without the fields that did not fit
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


# glibc's M_MMAP_THRESHOLD (malloc.h): blocks above it get their own mapping, unmapped on free
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 128 << 10
_malloc_tuned = False


def _tune_malloc() -> None:
    """Give freed chunk buffers and column arrays back to the OS. glibc raises its mmap threshold to
    the size of each large block freed (up to 32 MiB), so after the first 24 MiB chunk every chunk
    buffer and column array came from the heap, whose freed holes it keeps: the process's peak
    memory grew by about the size of every intermediate ever made (bench/memory.py measured 290
    against 106 bytes per kernel event after decode). A fixed threshold keeps large blocks mapped
    and returned when freed. Nothing happens on other C libraries, or once done."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): nothing to tune
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def load_streaming(path: str | os.PathLike, jobs: int = 1, progress=None) -> L.Loaded:
    _tune_malloc()
    p = Path(path)
    if not os.path.lexists(p):
        raise TraceError(str(p), "no such file or directory", hint="check the path")
    if p.is_dir():
        raise TraceError(str(p), "is a directory", hint="pass one trace file, or use the CLI on the directory")
    with L.open_regular(p) as f:  # a FIFO, device or socket is refused here, before any read
        size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise TraceError(
            str(p),
            "the file is empty (0 bytes)",
            hint="the profiler probably crashed before writing; capture the trace again",
        )
    warnings: list[str] = []
    state = L.ReadState()
    lim = L.limits()
    blocks = _threaded(L.read_blocks(p, warnings, progress, state, lim))
    try:
        loaded = _load(p, size, blocks, warnings, jobs, lim)
    finally:
        blocks.close()  # stops the reader thread on every exit path
    if loaded.read is None:
        loaded.read = state
        loaded.json_bytes = state.json_bytes
    return loaded


def _no_boundary(p: Path, lim: L.Limits, where: str) -> TraceError:
    return TraceError(
        str(p),
        f"{where} holds more than {L.human_bytes(lim.max_event_bytes)} with no event "
        f"boundary: one event (or a run of whitespace or garbage) beyond the bound "
        f"TRACEINSPECT_MAX_EVENT_BYTES={int(lim.max_event_bytes)}",
        hint="no real event comes near this (the largest seen are kilobytes): the file is corrupt or "
        "hostile; if it really is a trace, raise the bound, e.g. TRACEINSPECT_MAX_EVENT_BYTES=0 "
        "turns it off",
    )


def _load(p: Path, size: int, blocks, warnings: list[str], jobs: int, lim: L.Limits) -> L.Loaded:
    head = bytearray()
    # 1. find the start of the events array. Leading whitespace is dropped as it arrives and a first
    # byte that cannot start JSON stops the read at once, so neither is ever accumulated; the
    # metadata before the events is bounded like one event.
    start = None
    json_bytes = 0  # bytes of JSON consumed so far (offsets in messages)
    lead = 0  # leading whitespace dropped
    for b in blocks:
        json_bytes += len(b)
        if not head:
            n = len(b)
            b = b.lstrip()
            lead += n - len(b)
            if not b:
                continue
            if b[:1] not in (b"{", b"["):
                return L.decode(str(p), bytes(b[:4096]), size, warnings, origin=lead)  # raises: not JSON
        head += b
        start = _events_start(head)
        if start is not None:
            break
        if len(head) > lim.max_event_bytes:
            raise _no_boundary(p, lim, "the part before the 'traceEvents' array")
    deep = L.nesting_error(head)
    if deep is not None:  # in the blocks read to find the events array: the first violation
        raise L._too_deep(str(p), lead + deep)
    if start is None:  # the whole (small) file is in head: the careful whole-buffer path decides
        if not head:
            raise TraceError(str(p), "contains only whitespace", hint="capture the trace again")
        return L.decode(str(p), head, size, warnings, origin=lead)
    head_end, head_doc = start
    is_array = head_doc is None
    # buf[0] is a spare byte that becomes the '[' of the first chunk; chunks are decoded in place:
    # the separator before a chunk is overwritten with '[' and the one after it with ']'
    buf = bytearray(b" ") + head[head_end:]
    del head

    pool, workers = _chunk_pool(jobs)
    pending: list[Future | dict] = []
    dropped = 0
    # chunks no larger than the per-event bound: an event over the bound then always spans a cut,
    # where buf holds it alone, so the bound is exact
    chunk_bytes = int(min(CHUNK_BYTES, lim.max_event_bytes))
    try:
        eof = False
        want = chunk_bytes
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
            cut = _last_boundary(buf, want)
            if cut is None:
                _too_deep_so_far(p, buf, json_bytes, is_array, pending)
                # no boundary in buf[:want] (one enormous event?): read on, up to the per-event bound.
                # buf[1:] starts at an event, so this bounds exactly one event's size
                if want - 1 > lim.max_event_bytes:
                    raise _no_boundary(p, lim, "the events array")
                want = int(min(want + chunk_bytes, lim.max_event_bytes + 2))
                continue
            want = chunk_bytes
            end, rest = cut
            buf[0] = 0x5B  # '['
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
            origin = json_bytes - (len(buf) - 1) - len(prefix)  # where tail[0] would sit in the file
            del buf
            last = _decode_tail(p, tail, size, warnings, cut_ok=bool(parts), origin=origin)
            last.partials = [extract_events(last.events)]
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
    loaded = L.Loaded(
        path=str(p),
        events=[],
        doc=doc,
        file_bytes=size,
        json_bytes=0,
        warnings=last.warnings,
        lost_bytes=lost,
        dropped_events=dropped + last.dropped_events,
        truncated=last.truncated,
    )
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


def _decode_tail(p: Path, tail: bytes, size: int, warnings: list[str], cut_ok: bool, origin: int = 0) -> L.Loaded:
    """The tail by the whole-buffer decoder. A file cut inside its last event leaves a tail with no
    complete event: with complete chunks before it, that is a truncation like any other (the whole
    tail is the incomplete event), not an unreadable file."""
    try:
        return L.decode(str(p), tail, size, warnings, origin=origin)
    except TraceError:
        if not cut_ok:
            raise
        try:
            msgspec.json.decode(tail)
        except msgspec.DecodeError as e:
            if "truncated" not in str(e):
                raise TraceError(
                    str(p),
                    f"is not valid JSON ({e})",
                    hint="the file is corrupt; re-copy it or capture the trace again",
                ) from None
        return L.Loaded(
            path=str(p),
            events=[],
            doc=L.Document(),
            file_bytes=size,
            json_bytes=0,
            warnings=warnings,
            lost_bytes=len(tail) - len(b'{"traceEvents":['),
            truncated=True,
        )


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
    rest = bytes(buf[part.pop("end") :])
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
    loaded = L.Loaded(
        path=str(p),
        events=[],
        doc=doc,
        file_bytes=size,
        json_bytes=len(buf),
        warnings=warnings,
        dropped_events=0,
        top_keys=None if is_array else keys,
    )
    loaded.partials = [part]
    return loaded


def _wait_oldest(pending: list) -> None:
    for i, f in enumerate(pending):
        if isinstance(f, Future):
            pending[i] = f.result()
            return


_KEY_COLON = re.compile(rb"\s*:\s*\[")


def _events_start(buf: bytes):
    """(offset just after '[' of the events array, header Document or None for a bare array), or None
    while it cannot be told yet. A `"traceEvents"` key nested inside earlier metadata makes the
    header before it malformed; the next occurrence is tried."""
    s = buf.lstrip()
    if not s:
        return None
    lead = len(buf) - len(s)
    if s[:1] == b"[":
        return lead + 1, None
    if s[:1] != b"{":
        return None
    k = buf.find(_KEY)
    while k >= 0:
        m = _KEY_COLON.match(buf, k + len(_KEY))
        if m:
            head = bytes(buf[:k]).rstrip()
            if head.endswith(b","):
                head = head[:-1]
            if L.nesting_error(head) is not None:
                return None  # the whole-buffer path reports it
            doc = _header(head + b"}")
            if doc is not None:
                return m.end(), doc
        k = buf.find(_KEY, k + 1)
    return None


def _header(data: bytes) -> L.Document | None:
    """The top-level keys before traceEvents as a Document; keys of unexpected types are dropped
    one by one (as the whole-buffer path's lenient decoder does), None if the JSON is malformed."""
    try:
        return L._DOC_DECODER.decode(data)
    except msgspec.ValidationError:
        pass
    except (msgspec.DecodeError, RecursionError):
        return None
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, RecursionError):
        return None
    doc = L.Document()
    for k, v in top.items():
        if k in L.Document.__struct_fields__ and k != "traceEvents":
            try:
                setattr(doc, k, getattr(msgspec.convert({k: msgspec.json.decode(v)}, L.Document, strict=False), k))
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError):
                continue
    return doc


def _last_boundary(buf: bytes, end: int | None = None):
    """(end of the chunk, start of the rest) at the last `}, {` between events in buf[:end], or None.
    Looks at a short tail window first and widens it only when the window holds no boundary."""
    end = len(buf) if end is None else min(end, len(buf))
    window = 64 << 10
    while True:
        lo = max(0, end - window)
        m = None
        for m in _BOUNDARY.finditer(buf, lo, end):
            pass
        if m is not None:
            brace = buf.rindex(b"{", m.start(), m.end())
            return m.start() + 1, brace
        if lo == 0:
            return None
        window *= 4
