"""Path -> decoded Kineto document: gzip sniffing, typed msgspec decoding, truncated-file recovery.

Owns reading bytes and decoding JSON; builds no tables (tables.py) and never prints.
Events are decoded straight into slotted msgspec structs; `args` keeps only the keys analyses use
(every other key is skipped by the decoder; shapes stay undecoded `Raw` slices).
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Union

import msgspec
from msgspec import Raw, Struct

from ..errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 8 << 20          # read / decompress granularity
COMPRESSED_READ = 1 << 20      # gzip input read per call
_EMPTY_RAW = Raw(b"")


class Args(Struct, gc=False):
    """The subset of `args` that analyses read, for every category at once: one typed pass over the
    file skips every other key (call stacks, strides, ...) without building objects for it.
    Spellings differ by Kineto era (SIGNATURES.md 1.4). Shapes stay undecoded (`Raw`)."""

    correlation: Union[int, None] = None
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    external_id_old: Union[int, None] = msgspec.field(default=None, name="external id")
    device: Union[int, None] = None
    stream: Union[int, None] = None
    cbid: Union[int, None] = None
    cid: Union[int, None] = None  # ROCm roctracer callback id
    nbytes: Union[int, float, None] = msgspec.field(default=None, name="bytes")
    grid: Union[list, None] = None
    block: Union[list, None] = None
    collective: Union[str, None] = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Union[int, None] = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Union[int, None] = msgspec.field(default=None, name="Out msg nelems")
    group_size: Union[int, None] = msgspec.field(default=None, name="Group size")
    dtype: Union[str, None] = None
    input_dims: Raw = msgspec.field(default=_EMPTY_RAW, name="Input Dims")
    input_dims_old: Raw = msgspec.field(default=_EMPTY_RAW, name="Input dims")
    input_type: Raw = msgspec.field(default=_EMPTY_RAW, name="Input type")
    name: Union[str, None] = None          # ph "M" events: process_name / thread_name
    mem_bytes: Union[int, float, None] = msgspec.field(default=None, name="Bytes")   # [memory] instants
    total_allocated: Union[int, float, None] = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Union[int, float, None] = msgspec.field(default=None, name="Total Reserved")
    device_type: Union[int, None] = msgspec.field(default=None, name="Device Type")
    device_id: Union[int, None] = msgspec.field(default=None, name="Device Id")          # [memory] instants


class Event(Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: float = 0.0
    dur: Union[float, None] = None
    args: Union[Args, None] = None
    id: Union[int, str, None] = None


class Document(Struct, gc=False):
    """Top-level keys of a Kineto trace. Unknown keys are skipped without being parsed."""

    traceEvents: list[Event] = []
    schemaVersion: Union[int, None] = None
    deviceProperties: Union[list, None] = None
    distributedInfo: Union[dict, None] = None
    baseTimeNanoseconds: Union[int, None] = None
    displayTimeUnit: Union[str, None] = None
    traceName: Union[str, None] = None
    record_shapes: Any = None
    with_stack: Any = None
    profile_memory: Any = None
    with_modules: Any = None
    with_flops: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    traceinspect: Any = None   # run configuration written by traceinspect.capture


_DOC_DECODER = msgspec.json.Decoder(Document)
_LIST_DECODER = msgspec.json.Decoder(list[Event])
_RAW_LIST_DECODER = msgspec.json.Decoder(list[Raw])
_EVENT_DECODER = msgspec.json.Decoder(Event)
_ANY_DECODER = msgspec.json.Decoder()


@dataclass
class Loaded:
    """A decoded file: events, top-level metadata, and what went wrong while reading it."""

    path: str
    events: list[Event]
    doc: Document
    file_bytes: int                 # on disk
    json_bytes: int                 # uncompressed JSON
    warnings: list[str] = field(default_factory=list)
    lost_bytes: int = 0             # bytes discarded from a truncated file
    dropped_events: int = 0         # events that could not be decoded at all
    partials: list | None = None    # columns extracted chunk by chunk (streaming path), else None


def read_blocks(path: Path, warnings: list[str], progress=None) -> Iterator[bytes]:
    """Decompressed bytes of the file in blocks; gzip is sniffed from the magic number.
    progress(fraction of the file read) is called as blocks are read, when given."""
    f = open(path, "rb")
    if progress is not None:
        size = max(1, os.fstat(f.fileno()).st_size)
        raw_read = f.read

        def read(n):
            b = raw_read(n)
            progress(min(1.0, f.tell() / size))
            return b
    else:
        read = f.read
    with f:
        first = read(2)
        if first != GZIP_MAGIC:
            while first:
                yield first
                first = read(BLOCK_BYTES)
            return
        d = zlib.decompressobj(wbits=31)
        data = first + read(COMPRESSED_READ)
        produced = 0
        while True:
            try:
                # bounded output per call: a highly compressed trace must not inflate all at once
                out = d.decompress(data, BLOCK_BYTES)
            except zlib.error as e:
                if produced == 0:
                    raise TraceError(str(path), f"starts like a gzip file but cannot be decompressed ({e})",
                                     hint="re-download or re-copy the file; it is corrupt") from None
                warnings.append(f"the gzip stream is corrupt after {produced} bytes ({e}); "
                                "the complete events before it were kept")
                return
            if out:
                produced += len(out)
                yield out
            if d.eof:
                rest = d.unused_data + read(COMPRESSED_READ)
                if rest[:2] == GZIP_MAGIC:  # another gzip member follows
                    d = zlib.decompressobj(wbits=31)
                    data = rest
                    continue
                return
            data = d.unconsumed_tail
            if not data:
                data = read(COMPRESSED_READ)
                if not data:
                    tail = d.flush()
                    if tail:
                        yield tail
                    warnings.append("the gzip stream is truncated (the file was cut off while being written); "
                                    "the complete events before the cut were kept")
                    return


def read_bytes(path: Path, warnings: list[str]) -> tuple[bytes, int]:
    """The whole file's JSON bytes (the same blocks the streaming reader consumes, joined)."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise TraceError(str(path), f"cannot read the file ({e.strerror or e})",
                         hint="check the path and its permissions") from None
    if size == 0:
        raise TraceError(str(path), "the file is empty (0 bytes)",
                         hint="the profiler probably crashed before writing; capture the trace again")
    return b"".join(read_blocks(path, warnings)), size


_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


def _recover_truncated(path: str, data: bytes, is_array: bool):
    """Keep every complete event of a JSON document cut off mid-write.

    Walks back over event boundaries (`}, {`) from the end and closes the array there; a boundary
    inside a nested object fails to parse and the next earlier one is tried.
    """
    closer = b"]" if is_array else b"]}"
    if not is_array:
        pos = data.find(b'"traceEvents"')
        if pos < 0:
            return None
    end = len(data)
    for _ in range(64):
        m = None
        for m in _BOUNDARY.finditer(data, max(0, end - (1 << 20)), end):
            pass
        if m is None:
            if end - (1 << 20) <= 0:
                return None
            end = max(0, end - (1 << 20))
            continue
        cut = m.start() + 1
        candidate = data[:cut] + closer
        try:
            doc = (_LIST_DECODER if is_array else _DOC_DECODER).decode(candidate)
        except msgspec.DecodeError:
            end = m.start()
            continue
        return doc, len(data) - cut
    return None


def decode_event_lenient(raw) -> Event | None:
    """One event's JSON -> Event, keeping what fits the schema: strict first, then with lax type
    coercion ("128" -> 128), then args dropped, then only the timing fields; None if nothing fits."""
    try:
        return _EVENT_DECODER.decode(raw)
    except msgspec.DecodeError:
        pass
    try:
        obj = _ANY_DECODER.decode(raw)
        args = obj.pop("args", None) if isinstance(obj, dict) else None
        ev = msgspec.convert(obj, Event, strict=False)
        if isinstance(args, dict):
            for k in ("Input Dims", "Input dims", "Input type"):
                if k in args:
                    args[k] = Raw(msgspec.json.encode(args[k]))
            try:
                ev.args = msgspec.convert(args, Args, strict=False)
            except (msgspec.ValidationError, TypeError):
                ev.args = None
        return ev
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError):
        try:
            obj = _ANY_DECODER.decode(raw)
            slim = {k: obj.get(k) for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur")
                    if isinstance(obj, dict) and obj.get(k) is not None}
            return msgspec.convert(slim, Event, strict=False)
        except Exception:
            return None


def _decode_lenient(path: str, data: bytes, is_array: bool, warnings: list[str]):
    """Slow path for documents whose events do not fit the typed schema: decode event by event."""
    if is_array:
        raws = _RAW_LIST_DECODER.decode(data)
        doc = Document()
    else:
        top = msgspec.json.decode(data, type=dict[str, Raw])
        if "traceEvents" not in top:
            raise TraceError(path, "is JSON but has no 'traceEvents' list: not a Kineto/Chrome trace",
                             hint="pass a torch.profiler trace (*.pt.trace.json[.gz]), not a memory snapshot or execution trace")
        raws = _RAW_LIST_DECODER.decode(top.pop("traceEvents"))
        meta = {k: msgspec.json.decode(v) for k, v in top.items() if k in Document.__struct_fields__}
        doc = msgspec.convert(meta, Document, strict=False)
    events: list[Event] = []
    dropped = 0
    for raw in raws:
        ev = decode_event_lenient(raw)
        if ev is None:
            dropped += 1
        else:
            events.append(ev)
    if dropped:
        warnings.append(f"{dropped} events had fields of unexpected types and were dropped")
    return doc, events, dropped


def decode(path: str, data: bytes, file_bytes: int, warnings: list[str]) -> Loaded:
    head = data[:4096].lstrip()
    if not head:
        raise TraceError(path, "contains only whitespace", hint="capture the trace again")
    first = head[:1]
    if first not in (b"{", b"["):
        preview = head[:20].decode("utf-8", "replace").encode("unicode_escape").decode()
        raise TraceError(path, f"is not JSON (it starts with '{preview}')",
                         hint="pass a torch.profiler trace (*.pt.trace.json or .json.gz)")
    is_array = first == b"["
    lost = 0
    dropped = 0
    try:
        try:
            if is_array:
                events = _LIST_DECODER.decode(data)
                doc = Document()
            else:
                doc = _DOC_DECODER.decode(data)
                events = doc.traceEvents
        except msgspec.ValidationError:
            # well-formed JSON with fields of unexpected types: decode event by event (a malformed
            # document fails here too, and is handled below like any other)
            doc, events, dropped = _decode_lenient(path, data, is_array, warnings)
    except msgspec.DecodeError as e:
        if "truncated" not in str(e):
            raise TraceError(path, f"is not valid JSON ({e})",
                             hint="the file is corrupt; re-copy it or capture the trace again") from None
        rec = _recover_truncated(path, data, is_array)
        if rec is None:
            raise TraceError(path, "is truncated and no complete event could be recovered",
                             hint="the profiler was killed while writing; capture the trace again") from None
        doc, lost = rec
        events = doc if is_array else doc.traceEvents
        if is_array:
            doc = Document()
        warnings.append(
            f"the file is truncated: the last {lost} bytes (an incomplete event and everything after "
            f"it) were discarded; every complete event before the cut was kept")
    if not is_array and not events:
        # distinguish "no traceEvents key" from an empty list
        if b'"traceEvents"' not in data[: min(len(data), 1 << 16)] and b'"traceEvents"' not in data:
            raise TraceError(path, "is JSON but has no 'traceEvents' list: not a Kineto/Chrome trace",
                             hint="pass a torch.profiler trace (*.pt.trace.json[.gz]), not a memory snapshot or execution trace")
    doc.traceEvents = []
    return Loaded(path=path, events=events, doc=doc, file_bytes=file_bytes, json_bytes=len(data),
                  warnings=warnings, lost_bytes=lost, dropped_events=dropped)


def load_file(path: str | os.PathLike) -> Loaded:
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), "no such file or directory", hint="check the path")
    warnings: list[str] = []
    data, size = read_bytes(p, warnings)
    return decode(str(p), data, size, warnings)


def find_trace_files(directory: str | os.PathLike) -> list[Path]:
    """Trace files under a directory: *.pt.trace.json[.gz] first; else any *.json[.gz]."""
    d = Path(directory)
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")))
    if not files:
        files = sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    return files
