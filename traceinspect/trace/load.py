"""Path -> decoded Kineto document: gzip sniffing, typed msgspec decoding, truncated-file recovery.

Owns reading bytes and decoding JSON; builds no tables (tables.py) and never prints.
Events are decoded straight into slotted msgspec structs; `args` keeps only the keys analyses use
(every other key is skipped by the decoder; shapes stay undecoded `Raw` slices).
This decoder is the reference: the native scanner (_scan.c) accepts what it accepts and defers to it
when unsure. The limits both enforce (nesting depth, int64 range) are declared here.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterator, Union

import msgspec
import numpy as np
from msgspec import Raw, Struct

from ..errors import TraceError, UsageError
from . import fields as _fields

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 8 << 20  # read / decompress granularity
COMPRESSED_READ = 1 << 20  # gzip input read per call
_EMPTY_RAW = Raw(b"")

# Containers nested deeper than this anywhere in a trace make it unreadable (exit 3). Kineto writes
# depth 6 at most (document, events, event, args, Input Dims, one shape); msgspec recurses per level
# and would hit Python's recursion limit near 1000, at a depth that depends on the caller's stack.
# The native scanner defers to this path before a value can reach the limit (_scan.MAX_NESTING).
MAX_NESTING = 128

# Integer fields hold int64 (the table columns are int64). msgspec decodes any size of integer; one
# outside this range fails validation like any field of the wrong type (see decode_event_lenient).
# Byte counts are floats (their columns are float64): an integer beyond float range fails the same way.
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


# The subset of `args` that analyses read, for every category at once, generated from the one
# declaration of the event fields (trace/fields.py): one typed pass over the file skips every other key
# (call stacks, strides, ...) without building objects for it. Shapes stay undecoded (`Raw`).
Args = _fields.args_struct(__name__)


class Event(Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[Int64, str] = 0
    tid: Union[Int64, str] = 0
    ts: float = 0.0
    dur: Union[float, None] = None
    args: Union[Args, None] = None
    id: Union[Int64, str, None] = None


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
    traceinspect: Any = None  # run configuration written by traceinspect.capture


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
    file_bytes: int  # on disk
    json_bytes: int  # uncompressed JSON
    warnings: list[str] = field(default_factory=list)
    lost_bytes: int = 0  # bytes discarded from a truncated file (the incomplete last event)
    dropped_events: int = 0  # events that could not be decoded at all
    partials: list | None = None  # columns extracted chunk by chunk (streaming path), else None
    top_keys: frozenset | None = None  # top-level keys present in a streamed tail (null ones too)
    truncated: bool = False  # the JSON ends mid-document; only complete events were kept
    read: "ReadState | None" = None  # what the byte reader learnt (gzip, a stream cut mid-way)


# --- resource bounds ---------------------------------------------------------------------------------
# Peak memory follows the events kept, never the bytes of what is not an event: these bounds stop a
# hostile or broken file (a gzip bomb, one absurd event, a FIFO) in seconds with a one-line error.
# Real gzip'd Kineto traces inflate 8-31x (77 real traces, 2021-2025 Kineto); deflate's ceiling is
# about 1032x, which is what zeros, spaces or NULs reach. So 200x is 6x above any real trace and
# 5x below a bomb. The largest event in those traces is 7 KB and the longest name 5,160 characters;
# a Python stack or a foreach op's shapes over thousands of tensors stays under 1 MB.
DEFAULT_MAX_INFLATE = 200  # TRACEINSPECT_MAX_INFLATE: decompressed / compressed bytes
INFLATE_GRACE_BYTES = 16 << 20  # the ratio is checked once this much has been decompressed
DEFAULT_MAX_JSON_BYTES = 64 << 30  # TRACEINSPECT_MAX_JSON_BYTES: uncompressed JSON of one file
DEFAULT_MAX_EVENT_BYTES = 32 << 20  # TRACEINSPECT_MAX_EVENT_BYTES: one event (or a stretch with no
# event boundary: whitespace, garbage) and the metadata before
# traceEvents; more than a chunk, so the check is exact


@dataclass(frozen=True)
class Limits:
    max_inflate: float
    max_json_bytes: int
    max_event_bytes: int


def _env_limit(name: str, default, kind=int):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = kind(raw)
    except ValueError:
        v = -1
    if v < 0 or v != v:
        raise UsageError(f"{name}={raw!r}: expected a number >= 0 (0 turns the bound off)")
    return v if v > 0 else float("inf")


def limits() -> Limits:
    """The bounds in force (read from the environment on each load, so tests and users can set them)."""
    return Limits(
        max_inflate=_env_limit("TRACEINSPECT_MAX_INFLATE", DEFAULT_MAX_INFLATE, float),
        max_json_bytes=_env_limit("TRACEINSPECT_MAX_JSON_BYTES", DEFAULT_MAX_JSON_BYTES),
        max_event_bytes=_env_limit("TRACEINSPECT_MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES),
    )


def human_bytes(n: float) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{int(n)} bytes"


def _file_kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def not_regular(path: str | os.PathLike, mode: int) -> TraceError:
    """The error for a path that is not a regular file (one message for the CLI and the readers)."""
    return TraceError(
        str(path),
        f"is {_file_kind(mode)}, not a regular file",
        hint="pass a trace file saved on disk (.json or .json.gz); traceinspect does not read pipes or devices",
    )


def open_regular(path: str | os.PathLike):
    """Open a trace for reading, refusing anything but a regular file: open() on a FIFO blocks until
    a writer comes, and a device never ends. The check is made on the opened descriptor (opened
    non-blocking), so a file swapped for a FIFO after a stat cannot hang the reader either."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TraceError(
            str(path), f"cannot open the file ({e.strerror or e})", hint="check the path and its permissions"
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_regular(path, st.st_mode)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


GZIP_RATIO_GUESS = 10  # JSON bytes per gzip byte, for sizing decisions only (real traces: 8-31x)


def estimate_json_bytes(path: str | os.PathLike) -> int:
    """The file's size, times GZIP_RATIO_GUESS when it is gzip: a cheap guess of its JSON size for
    choosing work (cache, progress bar, parallel decoders), never reported as a measurement."""
    with open_regular(path) as f:  # never a blocking open of a FIFO
        gz = f.read(2) == GZIP_MAGIC
        size = os.fstat(f.fileno()).st_size
    return size * (GZIP_RATIO_GUESS if gz else 1)


@dataclass
class ReadState:
    """What read_blocks learnt about the byte stream, for the truncation report."""

    gzip: bool = False
    compressed_bytes: int = 0  # bytes read from the file
    json_bytes: int = 0  # bytes produced (decompressed)
    stream_cut: bool = False  # a gzip stream that ends without its trailer (cut mid-stream)
    corrupt: str = ""  # a gzip stream that stops decoding part way


def _too_big(path: Path, what: str, env: str, limit) -> TraceError:
    shown = f"{limit:g}" if env == "TRACEINSPECT_MAX_INFLATE" else f"{int(limit)} ({human_bytes(limit)})"
    return TraceError(
        str(path),
        f"{what}, beyond the bound {env}={shown}",
        hint=f"no real trace comes near this: it is probably a decompression bomb or a corrupt "
        f"file; if it really is a trace, raise the bound ({env}=0 turns it off)",
    )


def read_blocks(
    path: Path, warnings: list[str], progress=None, state: ReadState | None = None, lim: Limits | None = None
) -> Iterator[bytes]:
    """Decompressed bytes of the file in blocks of at most BLOCK_BYTES; gzip is sniffed from the
    magic number. Decompression stops with a TraceError as soon as the output passes the bounds
    (inflation ratio, total size), so a bomb costs a few MiB, not its inflated size.
    progress(fraction of the file read) is called as blocks are read, when given."""
    state = state if state is not None else ReadState()
    lim = lim or limits()
    f = open_regular(path)
    size = max(1, os.fstat(f.fileno()).st_size)
    raw_read = f.read

    def read(n):
        b = raw_read(n)
        state.compressed_bytes += len(b)
        if progress is not None:
            progress(min(1.0, f.tell() / size))
        return b

    with f:
        if size > lim.max_json_bytes:
            raise _too_big(path, f"is {human_bytes(size)}", "TRACEINSPECT_MAX_JSON_BYTES", lim.max_json_bytes)
        first = read(2)
        if first != GZIP_MAGIC:
            while first:
                state.json_bytes += len(first)
                yield first
                first = read(BLOCK_BYTES)
            return
        state.gzip = True
        d = zlib.decompressobj(wbits=31)
        data = first + read(COMPRESSED_READ)
        while True:
            before = d.copy()
            try:
                # bounded output per call: a highly compressed trace must not inflate all at once
                out = d.decompress(data, BLOCK_BYTES)
            except zlib.error as e:
                # zlib drops the whole call's output on an error: replay the call from its saved state in
                # small steps, so everything inflated before the corrupt byte is kept
                salvage = _salvage(before, data)
                if salvage:
                    state.json_bytes += len(salvage)
                    yield salvage
                if state.json_bytes == 0:
                    raise TraceError(
                        str(path),
                        f"starts like a gzip file but cannot be decompressed ({e})",
                        hint="re-download or re-copy the file; it is corrupt",
                    ) from None
                state.corrupt = str(e)
                warnings.append(
                    f"the gzip stream is corrupt after {state.json_bytes} bytes of JSON ({e}); "
                    "the complete events before it were kept"
                )
                return
            if out:
                state.json_bytes += len(out)
                produced = state.json_bytes
                if produced > lim.max_json_bytes:
                    raise _too_big(
                        path,
                        f"inflates to more than {human_bytes(lim.max_json_bytes)} of JSON",
                        "TRACEINSPECT_MAX_JSON_BYTES",
                        lim.max_json_bytes,
                    )
                consumed = max(1, state.compressed_bytes - len(d.unconsumed_tail) - len(d.unused_data))
                if produced > INFLATE_GRACE_BYTES and produced > lim.max_inflate * consumed:
                    raise _too_big(
                        path,
                        f"inflates more than {lim.max_inflate:g}x ({human_bytes(consumed)} of "
                        f"gzip gave {human_bytes(produced)} of JSON so far)",
                        "TRACEINSPECT_MAX_INFLATE",
                        lim.max_inflate,
                    )
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
                        state.json_bytes += len(tail)
                        yield tail
                    state.stream_cut = True
                    return


def _salvage(d, data: bytes, step: int = 512) -> bytes:
    """What decompressor d inflates from data before it hits an error, fed `step` bytes at a time
    (bounded like every other output: at most BLOCK_BYTES)."""
    out = bytearray()
    for i in range(0, len(data), step):
        try:
            out += d.decompress(data[i : i + step], BLOCK_BYTES - len(out))
        except zlib.error:
            break
        if len(out) >= BLOCK_BYTES or d.eof:
            break
    return bytes(out)


def read_bytes(path: Path, warnings: list[str], state: ReadState | None = None) -> tuple[bytearray, int]:
    """The whole file's JSON bytes, accumulated in one buffer as they are decompressed (never a list of
    blocks joined into a second copy), under the same bounds as the streaming reader."""
    f = open_regular(path)
    with f:
        size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise TraceError(
            str(path),
            "the file is empty (0 bytes)",
            hint="the profiler probably crashed before writing; capture the trace again",
        )
    buf = bytearray()
    for b in read_blocks(path, warnings, state=state):
        buf += b
    return buf, size


# +1 for an opening bracket, -1 for a closing one
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_NESTING_BLOCK = 4 << 20


# every byte but quotes, backslashes and brackets
_BRACKETS_IN_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"\\[]{}')


def _within_limit_quick(data, limit: int) -> bool | None:
    """Whether data nests no deeper than limit, where a quick exact answer exists, else None. Only
    quotes, backslashes and brackets are kept (bytes.translate, one C pass). Without backslashes the
    quotes alternate open/close: deleting adjacent '""' pairs (empty strings, or the end of one string
    and the start of the next) keeps that alternation and leaves only the strings holding brackets,
    which the regular expression deletes. If no quote is left, every remaining byte is a structural
    bracket: a running sum over them, in slices (bounded memory, early exit), is the depth."""
    s = (data if isinstance(data, bytes) else bytes(data)).translate(None, _NOT_STRUCTURE)
    if b"\\" in s:
        return None
    s = s.replace(b'""', b"")
    if b'"' in s:
        s = _BRACKETS_IN_STRING.sub(b"", s)
        if b'"' in s:
            return None  # an unterminated string
    depth = 0
    step = 1 << 20
    for i in range(0, len(s), step):
        levels = _STEP[np.frombuffer(s, dtype=np.uint8, count=min(step, len(s) - i), offset=i)]
        levels = levels.astype(np.int64).cumsum()  # (cumsum with dtype= is 10x slower)
        levels += depth
        if levels.max() > limit:
            return False
        depth = int(levels[-1])
    return True


def nesting_error(data, limit: int = MAX_NESTING) -> int | None:
    """Offset of the first bracket (outside strings) that opens a container `limit + 1` levels deep
    in data, or None. Exact on valid JSON; vectorised, in blocks, so it costs a few passes of numpy
    over the bytes and memory for one block. A document is at depth 0 before its first bracket."""
    if _within_limit_quick(data, limit):
        return None
    depth = 0
    in_string = 0  # quotes seen so far, mod 2
    escaped_next = False  # the block before ended in an odd run of backslashes
    mv = memoryview(data).cast("B")
    for start in range(0, len(mv), _NESTING_BLOCK):
        a = np.frombuffer(mv[start : start + _NESTING_BLOCK], dtype=np.uint8)
        folded = a | 0x20  # '[' -> '{', ']' -> '}'
        m = folded == 0x7B
        m |= folded == 0x7D
        m |= a == 0x22
        m |= a == 0x5C
        idx = np.flatnonzero(m)
        del folded, m
        carried, escaped_next = escaped_next, False
        if not idx.size:
            continue
        sub = a[idx]
        if carried and idx[0] == 0:
            sub[0] = 0  # escaped by the previous block's last backslash
        bs = idx[sub == 0x5C]
        if bs.size:
            # a run of n backslashes escapes the byte after it when n is odd
            breaks = np.flatnonzero(np.diff(bs) != 1)
            run_start = bs[np.r_[0, breaks + 1]]
            run_end = bs[np.r_[breaks, bs.size - 1]]
            after = run_end[((run_end - run_start + 1) & 1).astype(bool)] + 1
            if after.size and after[-1] == len(a):
                escaped_next = True
                after = after[:-1]
            sub[np.isin(idx, after)] = 0
        quotes = sub == 0x22
        step = _STEP[sub]
        step[((quotes.astype(np.int64).cumsum() + in_string) & 1).astype(bool)] = 0  # inside a string
        levels = step.astype(np.int64).cumsum()  # (cumsum with dtype= is 10x slower)
        levels += depth
        if levels.max() > limit:
            return start + int(idx[np.argmax(levels > limit)])
        depth = int(levels[-1])
        in_string = (in_string + int(np.count_nonzero(quotes))) & 1
    return None


def _too_deep(path: str, offset: int) -> TraceError:
    return TraceError(
        path,
        f"is nested deeper than {MAX_NESTING} levels at byte {offset} of its JSON",
        hint="this is not a torch.profiler trace (Kineto nests 6 levels); check where the file came from",
    )


# the last \uD800-\uDBFF escape of a buffer (a high surrogate) and what follows it
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE_PREFIX = re.compile(rb"(\\(u([dD]([c-fC-F][0-9a-fA-F]?)?)?)?)?")


def _lone_surrogate_at_end(data: bytes) -> int | None:
    """msgspec calls a high surrogate escape near the end of the input without its low half
    ('"\ud800"}') "truncated": it looks six bytes ahead for the low half. The offset just after the
    escape when that is the case (what msgspec reports for the same escape elsewhere), else None."""
    tail_at = max(0, len(data) - 16)
    last = None
    for m in _HIGH_SURROGATE.finditer(data, tail_at):
        k = m.start()
        while k > 0 and data[k - 1] == 0x5C:  # an escaped backslash is not an escape
            k -= 1
        if (m.start() - k) % 2 == 0:
            last = m
    if last is None:
        return None
    rest = data[last.end() :]
    if len(rest) >= 6 or _LOW_SURROGATE_PREFIX.fullmatch(rest):
        return None  # the low half may follow: the file is really cut there
    return last.end()


def top_level_keys(obj: bytes) -> frozenset[str] | None:
    """The keys of a JSON object (escapes decoded, values left undecoded), or None where obj is not a
    well-formed object. A streamed file's tail is given as an object whose first key is "" (in place of
    the traceEvents key already streamed): a "traceEvents" among its keys is a second events array,
    which wins like any repeated key, and a key given as null there replaces the head's value."""
    try:
        return frozenset(msgspec.json.decode(obj, type=dict[str, Raw]))
    except (msgspec.DecodeError, RecursionError):
        return None


_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


def _recover_truncated(path: str, data: bytearray | bytes, is_array: bool):
    """Keep every complete event of a JSON document cut off mid-write.

    Walks back over event boundaries (`}, {`) from the end and closes the array there; a boundary
    inside a nested object fails to parse and the next earlier one is tried. The closing bracket is
    written into the buffer in place (and the bytes under it restored), so no copy of the file is made.
    Returns (document or event list, bytes of the incomplete event discarded).
    """
    closer = b"]" if is_array else b"]}"
    if not is_array:
        pos = data.find(b'"traceEvents"')
        if pos < 0:
            return None
    buf = data if isinstance(data, bytearray) else bytearray(data)
    end = len(buf)
    decoder = _LIST_DECODER if is_array else _DOC_DECODER
    for _ in range(64):
        m = None
        for m in _BOUNDARY.finditer(buf, max(0, end - (1 << 20)), end):
            pass
        if m is None:
            if end - (1 << 20) <= 0:
                return None
            end = max(0, end - (1 << 20))
            continue
        cut = m.start() + 1
        saved = bytes(buf[cut : cut + len(closer)])
        buf[cut : cut + len(closer)] = closer
        try:
            # not released explicitly: undecoded Raw shapes in the events may still point into buf
            doc = decoder.decode(memoryview(buf)[: cut + len(closer)])
        except (msgspec.DecodeError, RecursionError):
            end = m.start()
            continue
        finally:
            buf[cut : cut + len(closer)] = saved
        return doc, len(buf) - (m.end() - 1)  # the incomplete event, from its opening brace
    return None


def decode_event_lenient(raw) -> Event | None:
    """One event's JSON -> Event, keeping what fits the schema: strict first, then with lax type
    coercion ("128" -> 128), then args dropped, then only the timing fields; None if nothing fits."""
    return lenient_event(raw)[0]


def _fitting(obj: dict, typ) -> tuple[Any, bool]:
    """obj as typ (lax coercion), and whether keys were left out: a key whose value does not fit
    (a ROCm runtime call's `"stream": "0x0"` in an int field) is dropped alone, never its
    neighbours (the call's correlation id). Every field of Event and Args has a default, so each key
    can be tried on its own."""
    _bad = (msgspec.ValidationError, TypeError, ValueError)
    try:
        return msgspec.convert(obj, typ, strict=False), False
    except _bad:
        pass
    kept = {}
    for k, v in obj.items():
        try:
            msgspec.convert({k: v}, typ, strict=False)
        except _bad:
            continue
        kept[k] = v
    return msgspec.convert(kept, typ, strict=False), True


def lenient_event(raw) -> tuple[Event | None, bool]:
    """decode_event_lenient, and whether a part of the event was ignored (the fields that did not
    fit, each on its own) because it did not fit: the readers count those events in a warning."""
    try:
        return _EVENT_DECODER.decode(raw), False
    except msgspec.DecodeError:
        pass
    try:
        obj = _ANY_DECODER.decode(raw)
        if not isinstance(obj, dict):
            return Event(), True  # an entry that is not an object: counted as an event with nothing kept
        args = obj.pop("args", None)
        ev, part = _fitting(obj, Event)
        if isinstance(args, dict):
            for k in ("Input Dims", "Input dims", "Input type"):
                if k in args:
                    args[k] = Raw(msgspec.json.encode(args[k]))
            ev.args, part_args = _fitting(args, Args)
            part = part or part_args
        elif args is not None:
            part = True  # args that are not an object: ignored
        return ev, part
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError, RecursionError):
        return None, False


_DROPPED = " events had fields of unexpected types and were dropped"
_PARTIAL = (
    " events had fields of unexpected types (or integers beyond int64) that were ignored; "
    "the rest of each event was kept"
)


def _note(warnings: list[str], n: int, text: str) -> None:
    """Count n events in the one warning ending in text (pieces of a file decoded apart, by either
    reader, add up to the same single warning)."""
    if not n:
        return
    for i, w in enumerate(warnings):
        if w.endswith(text) and w[: -len(text)].isdigit():
            warnings[i] = f"{int(w[: -len(text)]) + n}{text}"
            return
    warnings.append(f"{n}{text}")


def note_dropped(warnings: list[str], n: int) -> None:
    _note(warnings, n, _DROPPED)


def note_partial(warnings: list[str], n: int) -> None:
    _note(warnings, n, _PARTIAL)


def _decode_lenient(path: str, data: bytes, is_array: bool, warnings: list[str]):
    """Slow path for documents whose events do not fit the typed schema: decode event by event."""
    if is_array:
        raws = _RAW_LIST_DECODER.decode(data)
        doc = Document()
    else:
        top = msgspec.json.decode(data, type=dict[str, Raw])
        if "traceEvents" not in top:
            raise TraceError(
                path,
                "is JSON but has no 'traceEvents' list: not a Kineto/Chrome trace",
                hint="pass a torch.profiler trace (*.pt.trace.json[.gz]), not a memory snapshot or execution trace",
            )
        raws = _RAW_LIST_DECODER.decode(top.pop("traceEvents"))
        meta = {k: msgspec.json.decode(v) for k, v in top.items() if k in Document.__struct_fields__}
        doc = msgspec.convert(meta, Document, strict=False)
    events: list[Event] = []
    dropped = partial = 0
    for raw in raws:
        ev, part = lenient_event(raw)
        if ev is None:
            dropped += 1
        else:
            events.append(ev)
            partial += part
    note_dropped(warnings, dropped)
    note_partial(warnings, partial)
    return doc, events, dropped, partial


def decode(path: str, data: bytes, file_bytes: int, warnings: list[str], origin: int = 0) -> Loaded:
    """data -> Loaded. origin: where data[0] sits in the file's JSON (a streamed tail), for messages."""
    head = data[:4096].lstrip()
    if not head:
        raise TraceError(path, "contains only whitespace", hint="capture the trace again")
    first = head[:1]
    if first not in (b"{", b"["):
        preview = head[:20].decode("utf-8", "replace").encode("unicode_escape").decode()
        raise TraceError(
            path,
            f"is not JSON (it starts with '{preview}')",
            hint="pass a torch.profiler trace (*.pt.trace.json or .json.gz)",
        )
    is_array = first == b"["
    deep = nesting_error(data)
    if deep is not None:
        raise _too_deep(path, origin + deep)
    lost = 0
    dropped = 0
    rec_used = False
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
            doc, events, dropped, _ = _decode_lenient(path, data, is_array, warnings)
    except RecursionError:  # a recursion limit set far below the default: MAX_NESTING did not protect
        raise TraceError(
            path,
            "is nested too deeply for the JSON decoder",
            hint="raise sys.setrecursionlimit, or check where the file came from",
        ) from None
    except msgspec.DecodeError as e:
        lone = _lone_surrogate_at_end(data) if "truncated" in str(e) else None
        if lone is not None:
            e = f"JSON is malformed: unexpected end of escaped utf-16 surrogate pair (byte {origin + lone})"
        if "truncated" not in str(e):
            raise TraceError(
                path, f"is not valid JSON ({e})", hint="the file is corrupt; re-copy it or capture the trace again"
            ) from None
        rec = _recover_truncated(path, data, is_array)
        rec_used = True
        if rec is None:
            raise TraceError(
                path,
                "is truncated and no complete event could be recovered",
                hint="the profiler was killed while writing; capture the trace again",
            ) from None
        doc, lost = rec
        events = doc if is_array else doc.traceEvents
        if is_array:
            doc = Document()
        # the warning that says how much was lost is written by model.from_loaded, which knows the steps
    if not is_array and not events:
        # distinguish "no traceEvents key" from an empty list
        if b'"traceEvents"' not in data[: min(len(data), 1 << 16)] and b'"traceEvents"' not in data:
            raise TraceError(
                path,
                "is JSON but has no 'traceEvents' list: not a Kineto/Chrome trace",
                hint="pass a torch.profiler trace (*.pt.trace.json[.gz]), not a memory snapshot or execution trace",
            )
    doc.traceEvents = []
    return Loaded(
        path=path,
        events=events,
        doc=doc,
        file_bytes=file_bytes,
        json_bytes=len(data),
        warnings=warnings,
        lost_bytes=lost,
        dropped_events=dropped,
        truncated=rec_used,
    )


def load_file(path: str | os.PathLike) -> Loaded:
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), "no such file or directory", hint="check the path")
    warnings: list[str] = []
    state = ReadState()
    data, size = read_bytes(p, warnings, state)
    loaded = decode(str(p), data, size, warnings)
    loaded.read = state
    return loaded


def find_trace_files(directory: str | os.PathLike) -> list[Path]:
    """Trace files under a directory: *.pt.trace.json[.gz] first; else any *.json[.gz]."""
    d = Path(directory)
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")))
    if not files:
        files = sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    return files
