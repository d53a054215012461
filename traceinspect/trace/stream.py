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
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Iterator

import msgspec

from ..errors import TraceError
from . import load as L
from .tables import extract

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
        try:
            events = L._LIST_DECODER.decode(data)
            dropped = 0
        except msgspec.DecodeError as e:
            if not isinstance(e, msgspec.ValidationError):
                return {"error": str(e)}  # a false boundary, or corruption: the caller starts over
            try:
                _, events, dropped = L._decode_lenient("", bytes(data), True, [])
            except msgspec.DecodeError as e2:
                return {"error": str(e2)}
        part = extract(events)
        del events  # releases the views into the caller's buffer before it is resized
        part["dropped"] = dropped
        return part
    finally:
        if was:
            gc.enable()


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

    pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
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
                want = len(buf) + CHUNK_BYTES  # no boundary yet (one enormous event?): read more
                continue
            want = CHUNK_BYTES
            end, rest = cut
            buf[0] = 0x5B   # '['
            buf[end] = 0x5D  # ']' over the separator after the chunk's last event
            if pool is not None:
                pending.append(pool.submit(_parse_chunk, bytes(buf[: end + 1])))
                if len(pending) > jobs + 1:  # bound the chunks in flight
                    _wait_oldest(pending)
            else:
                with memoryview(buf) as mv:
                    pending.append(_parse_chunk(mv[: end + 1]))
            del buf[: rest - 1]  # keep one byte before the next event for its '['
        # 2. the tail: last events, the closing bracket and the trailing metadata keys
        tail = (b"[" if is_array else b'{"traceEvents":[') + bytes(buf[1:])
        del buf
        parts = [f.result() if isinstance(f, Future) else f for f in pending]
        if any("error" in part for part in parts):
            # an event boundary was misread (or the middle of the file is corrupt): the whole-buffer
            # path parses the file in one piece and reports any real error precisely
            return L.load_file(p)
        last = L.decode(str(p), tail, size, warnings)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    for part in parts:
        dropped += part.pop("dropped", 0)
    parts.append(extract(last.events))
    doc = head_doc if head_doc is not None else L.Document()
    for k in L.Document.__struct_fields__:
        v = getattr(last.doc, k)
        if k != "traceEvents" and v is not None:
            setattr(doc, k, v)
    if dropped:
        warnings.append(f"{dropped} events had fields of unexpected types and were dropped")
    lost = last.lost_bytes
    loaded = L.Loaded(path=str(p), events=[], doc=doc, file_bytes=size, json_bytes=json_bytes,
                      warnings=last.warnings, lost_bytes=lost, dropped_events=dropped + last.dropped_events)
    loaded.partials = parts
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
    try:
        doc = L._DOC_DECODER.decode(head + b"}")
    except msgspec.DecodeError:
        return None
    return m.end(), doc


def _last_boundary(buf: bytes):
    """(end of the chunk, start of the rest) at the last `}, {` between events, or None."""
    lo = max(0, len(buf) - (4 << 20))
    while True:
        m = None
        for m in _BOUNDARY.finditer(buf, lo):
            pass
        if m is not None:
            brace = buf.rindex(b"{", m.start(), m.end())
            return m.start() + 1, brace
        if lo == 0:
            return None
        lo = max(0, lo - (16 << 20))
