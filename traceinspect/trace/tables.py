"""Decoded events -> typed columnar tables (pandas), with units normalised once.

Owns category normalisation across Kineto eras and the kernel -> launch -> CPU-op links.
Must not analyse: no busy/idle, no steps (timeline.py), no findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd

from . import fields as _fields
from .load import Event

# Category names across Kineto eras (SIGNATURES.md 1.3) -> one canonical kind.
CATEGORY = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "user": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "runtime",
    "hip_runtime": "runtime",
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "xpu_driver": "runtime",
    "python_function": "python",
    "python": "python",
    "cuda_sync": "sync",
    "xpu_sync": "sync",
    "trace": "span",
    "ac2g": "flow",
    "async": "flow",
    "async_cpu_to_gpu": "flow",
    "async_gpu": "flow",
    "fwdbwd": "flow_fwdbwd",
    "forward_backward": "flow_fwdbwd",
    "fwd_bwd": "flow_fwdbwd",
    "cpu_instant_event": "instant",
    "overhead": "overhead",
    # the tracks `traceinspect annotate` adds: known, and dropped like the profiler's overhead events, so
    # an annotated trace analyses exactly as its original
    "traceinspect": "overhead",
}

_MEMCPY_NAME = re.compile(r"Memcpy (\w+) \(([\w ]+) -> ([\w ]+)\)")


@dataclass
class Tables:
    kernels: pd.DataFrame
    memcpy: pd.DataFrame  # memcpy and memset; `is_memset`
    runtime: pd.DataFrame
    cpu_ops: pd.DataFrame  # cpu_op and CPU user annotations; `is_annotation`
    gpu_annotations: pd.DataFrame
    python: pd.DataFrame
    sync: pd.DataFrame
    memory: pd.DataFrame
    flows: pd.DataFrame  # ac2g launch flows (ph s at the runtime call, f at the GPU op); same ids as correlation
    thread_names: dict
    origin_us: float  # absolute ts of the earliest event; every *_us column is relative to it
    n_events: int
    warnings: list


def name_flags(names: pd.Series, match) -> np.ndarray:
    """match(name) for each row of a name column, evaluated once per distinct name (a categorical
    of millions of rows holds a few thousand distinct names); match may also be a set."""
    if isinstance(match, (set, frozenset)):
        members = match
        match = members.__contains__
    cats = names.array if isinstance(names.dtype, pd.CategoricalDtype) else pd.Categorical(names)
    flags = np.array([bool(match(str(c))) for c in cats.categories], dtype=bool)
    codes = np.asarray(cats.codes)
    return np.where(codes >= 0, flags[np.maximum(codes, 0)] if flags.size else False, False)


_INT64_MAX = (1 << 63) - 1


def _tid_checked(t) -> tuple[int, bool]:
    """A pid/tid/stream/flow id as an int64, -1 (absent) where it has no digits or leaves int64 (a
    string of 30 digits): never a crash, never a wrap; and whether it is absent because it left
    int64 (what the tables count and warn about; a string without digits is simply not an id)."""
    if not isinstance(t, int):
        try:
            t = int(t)
        except (TypeError, ValueError, OverflowError):
            m = re.search(r"(\d+)", t) if isinstance(t, str) else None
            t = int(m.group(1)) if m else -1
    return (t, False) if -_INT64_MAX <= t <= _INT64_MAX else (-1, True)


class _Beyond:
    """Counts id values (pid, tid, stream, flow id) read as absent because they left int64."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


def _grid_product(lists: list) -> np.ndarray:
    """_prod of each grid/block list (None -> 0): vectorised where every list is three integers, with
    the few products near or past int64 (where int64 would wrap) done by _prod; else one _prod per list."""
    try:
        arr = np.array([g if g is not None else (0, 0, 0) for g in lists], dtype=np.int64)
        if arr.ndim == 2 and arr.shape[0] and arr.shape[1] == 3:
            out = arr.prod(axis=1)
            near = np.flatnonzero(np.abs(arr.astype(np.float64)).prod(axis=1) >= 2.0**62)
            for i in near.tolist():
                out[i] = _prod(lists[i])
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([_prod(g) for g in lists], dtype=np.int64)


def _no_collectives(n: int) -> dict:
    """The collective columns of n kernels none of which is a collective."""
    return {
        "collective": np.full(n, None, dtype=object),
        "in_msg_nelems": np.full(n, -1, dtype=np.int64),
        "out_msg_nelems": np.full(n, -1, dtype=np.int64),
        "group_size": np.full(n, -1, dtype=np.int64),
        "comm_dtype": np.full(n, None, dtype=object),
    }


# A "partial" holds the columns of one chunk of events: {kind: {column: array}} plus counters. Chunks
# are extracted independently (possibly in worker processes) and assembled once; names are factorised
# per chunk as (codes, uniques) so that only compact arrays cross process boundaries.


# ---- both readers: the native scanner's column layout -> one partial per chunk ----

_NONE = np.iinfo(np.int64).min  # the value _scan gives an absent int; absence is a `present` bit
# bit k of the scan's `present` column: the k-th int64 column below holds a value (not absent or null)
_PRESENT_BIT = _fields.PRESENT_BIT  # bit k of the scan's `present` column (trace/fields.py)


def _strings(raw: list[bytes]) -> list[str]:
    """_scan's raw string spans -> str, with JSON escapes decoded by the same decoder as the
    Python path. Raises UnicodeDecodeError / msgspec.DecodeError where that path would fail too."""
    out = []
    for b in raw:
        out.append(msgspec.json.decode(b'"' + b + b'"') if b"\\" in b else b.decode("utf-8"))
    return out


_SCAN_DTYPES = {
    "ph": np.uint8,
    "has_args": np.uint8,
    "present": np.uint32,
    "ts": np.float64,
    "dur": np.float64,
    **{f: np.float64 for f in _fields.SCAN_FLOAT_FIELDS},
}
# Args attributes that are columns of the same name in the scan (int64 / float64), from trace/fields.py
_SCAN_INT_FIELDS = _fields.SCAN_INT_FIELDS
_SCAN_FLOAT_FIELDS = _fields.SCAN_FLOAT_FIELDS


def _scan_dtype(name: str):
    if name in _SCAN_DTYPES:
        return _SCAN_DTYPES[name]
    return np.int32 if name.endswith(("_idx", "_str")) else np.int64


_astuple = msgspec.structs.astuple
_ARG_FIELDS = tuple(f.name for f in _fields.ARGS)  # the order of load.Args's fields (tests/test_fields.py)


def _event_columns(events: list[Event]) -> tuple[dict, list, list]:
    """Decoded events -> the native scanner's column layout (`_scan.scan`'s columns, string spans and
    raw spans): the one conversion of a decoded event into columns. The pure-Python reader's chunks go
    through it whole, and the scanner's deferred events one by one, so both readers share every step
    from the columns on (`_columnize`)."""
    n = len(events)
    strings: list = [e.cat for e in events]
    strings += [e.name for e in events]
    raws: list = []
    phs = [e.ph for e in events]
    code = {p: (ord(p) if len(p) == 1 and ord(p) < 128 else (0 if p == "" else 1)) for p in set(phs)}
    a: dict = {
        "ph": np.array([code[p] for p in phs], dtype=np.uint8),
        "cat_idx": np.arange(n, dtype=np.int32),
        "name_idx": np.arange(n, 2 * n, dtype=np.int32),
        "ts": np.array([e.ts for e in events], dtype=np.float64),
        "dur": np.array([np.nan if e.dur is None else e.dur for e in events], dtype=np.float64),
    }
    present = _id_columns(events, a, strings)
    present |= _args_columns([e.args for e in events], a, strings, raws)
    a["present"] = present
    return a, strings, raws


def _str_ids(values: list, strings: list) -> np.ndarray:
    """The string ids of a column of str | None (None -> -1), appending the strings to `strings`."""
    out = np.full(len(values), -1, dtype=np.int32)
    at = [i for i, v in enumerate(values) if v is not None]
    if at:
        out[at] = np.arange(len(strings), len(strings) + len(at), dtype=np.int32)
        strings.extend(values[i] for i in at)
    return out


def _bits(key: str, given: np.ndarray) -> np.ndarray:
    """`key`'s bit of the layout's `present` column where given."""
    return given.astype(np.uint32) << np.uint32(_PRESENT_BIT[key])


def _id_columns(events: list[Event], a: dict, strings: list) -> np.ndarray:
    """pid, tid and id into `a` (an int, or 0 and the string's id in `<key>_str`); their present bits."""
    n = len(events)
    present = np.zeros(n, dtype=np.uint32)
    for key, absent in (("pid", 0), ("tid", 0), ("id", _NONE)):
        vals = [getattr(e, key) for e in events]
        if vals.count(None) == n:  # (ids of complete events)
            a[key], a[key + "_str"] = np.full(n, absent, dtype=np.int64), np.full(n, -1, dtype=np.int32)
            continue
        a[key] = np.array([v if type(v) is int else (0 if v is not None else absent) for v in vals], dtype=np.int64)
        a[key + "_str"] = _str_ids([v if type(v) is str else None for v in vals], strings)
        present |= _bits(key, np.array([v is not None for v in vals], dtype=bool))
    return present


def _args_columns(args: list, a: dict, strings: list, raws: list) -> np.ndarray:
    """Every `args` field into `a` (trace/fields.py's ints and floats, grid/block products, string and
    raw-span ids; one raw span per distinct shape or type list, as the scanner interns them); the
    ints' present bits."""
    n = len(args)
    present = np.zeros(n, dtype=np.uint32)
    a["has_args"] = np.array([g is not None for g in args], dtype=np.uint8)
    rows = np.flatnonzero(a["has_args"])
    given_args = [g for g in args if g is not None]
    # one tuple per event's args, then one sequence per field (a getattr per field and event costs
    # twice the whole decode)
    by_field = dict(zip(_ARG_FIELDS, zip(*map(_astuple, given_args)))) if given_args else dict.fromkeys(_ARG_FIELDS, ())

    def number(name: str, fill, dtype) -> tuple[np.ndarray, np.ndarray]:
        col = np.full(n, fill, dtype=dtype)
        given = np.zeros(n, dtype=bool)
        seq = by_field[name]
        if seq.count(None) < len(seq):  # most fields belong to one kind of event: else nothing to fill
            vals = np.array(seq, dtype=object)
            has = np.not_equal(vals, None)
            col[rows[has]] = vals[has].astype(dtype)
            given[rows[has]] = True
        return col, given

    for f in _SCAN_INT_FIELDS:
        a[f], given = number(f, _NONE, np.int64)
        present |= _bits(f, given)
    for f in _SCAN_FLOAT_FIELDS:
        a[f] = number(f, np.nan, np.float64)[0]
    for key in ("grid", "block"):
        a[key] = np.zeros(n, dtype=np.int64)
        a[key][rows] = _grid_product(list(by_field[key]))
    for col_name, attr in (("collective_idx", "collective"), ("dtype_idx", "dtype"), ("arg_name_idx", "name")):
        a[col_name] = np.full(n, -1, dtype=np.int32)
        a[col_name][rows] = _str_ids(list(by_field[attr]), strings)
    once: dict[bytes, int] = {}

    def raw_id(raw) -> int:
        if not len(raw):
            return -1
        b = bytes(raw)
        i = once.get(b)
        if i is None:
            i = once[b] = len(raws)
            raws.append(b)
        return i

    a["dims_idx"] = np.full(n, -1, dtype=np.int32)
    a["dims_idx"][rows] = [
        raw_id(d if len(d) else o) for d, o in zip(by_field["input_dims"], by_field["input_dims_old"])
    ]
    a["type_idx"] = np.full(n, -1, dtype=np.int32)
    a["type_idx"][rows] = [raw_id(t) for t in by_field["input_type"]]
    return present


# the string-id and raw-id columns of the layout: offsets when deferred events' columns join a scan
_STRING_ID_COLUMNS = (
    "cat_idx",
    "name_idx",
    "pid_str",
    "tid_str",
    "id_str",
    "collective_idx",
    "dtype_idx",
    "arg_name_idx",
)
_RAW_ID_COLUMNS = ("dims_idx", "type_idx")


# events the tables read: complete events, flows, instants (the [memory] ones) and metadata (thread
# names); the rest (counters, async spans, ...) are counted in n_events only
_READ_PHASES = frozenset("XsfiIM")


def extract_events(events: list[Event]) -> dict:
    """One chunk of events decoded by the Python reader -> the partial `extract_scanned` makes from the
    same events: the same columns, built by the same code from the scanner's column layout."""
    read = [e for e in events if e.ph in _READ_PHASES]
    arrays, strings, raws = _event_columns(read)
    part = _columnize(len(read), arrays, strings, raws)
    part["n_events"] = len(events)
    return part


def extract_scanned(scanned) -> dict:
    """A `_scan.scan` result -> the partial `extract` makes from the same events (same columns,
    same order, same dtypes, same counters), plus "dropped": deferred events the Python decoder
    could not keep either, and "partial": those it kept without the fields that did not fit. Raises msgspec.DecodeError where a deferred event is malformed for the
    typed decoder (bad UTF-8 in a field it decodes, ...): the whole chunk is then the Python path's."""
    from .load import _EVENT_DECODER, lenient_event

    n, _end, raw_cols, raw_strings, raw_values, deferred = scanned
    strings = _strings(raw_strings)
    raws = list(raw_values)
    arrays = {k: np.frombuffer(v, dtype=_scan_dtype(k)) for k, v in raw_cols.items()}
    dropped = partial = 0
    if deferred:
        # events the scanner was not sure about: decoded exactly as the Python path does, in place
        arrays = {k: v.copy() for k, v in arrays.items()}
        keep = np.ones(n, dtype=bool)
        at, evs = [], []
        for row, raw in deferred:
            try:
                ev, part = _EVENT_DECODER.decode(raw), False
            except msgspec.ValidationError:  # fields of unexpected types: as the Python path does
                ev, part = lenient_event(raw)
                partial += part
            if ev is None:
                keep[row] = False
                dropped += 1
            else:
                at.append(row)
                evs.append(ev)
        if evs:
            cols, more_strings, more_raws = _event_columns(evs)
            for k, v in cols.items():
                if k in _STRING_ID_COLUMNS or k in _RAW_ID_COLUMNS:
                    off = len(strings) if k in _STRING_ID_COLUMNS else len(raws)
                    v = np.where(v >= 0, v + off, -1).astype(v.dtype)
                arrays[k][at] = v
            strings += more_strings
            raws += more_raws
        if dropped:
            arrays = {k: v[keep] for k, v in arrays.items()}
            n = int(keep.sum())
    part = _columnize(n, arrays, strings, raws)
    part["dropped"] = dropped
    part["partial"] = partial
    return part


def _columnize(n: int, arrays: dict, strings: list, raws: list) -> dict:
    """Columns in the scanner's layout (n rows; string and raw ids into strings / raws) -> one partial:
    the events each table keeps, in file order, with the counters. Both readers end here."""
    lay = _Layout(n, arrays, strings, raws)
    tables = {**_gpu_tables(lay), **_host_tables(lay), **_instant_and_flow_tables(lay)}
    return {
        "tables": tables,
        "threads": _thread_names(lay),
        "unknown": lay.unknown,
        "no_dur": lay.no_dur,
        "neg_dur": lay.neg_dur,
        "ids_beyond_int64": lay.beyond.n,
        "n_events": int(n),
    }


_KIND_LIST = sorted(set(CATEGORY.values()))
_KIND_CODE = {k: i for i, k in enumerate(_KIND_LIST)}


class _Layout:
    """One chunk in the scanner's column layout, read a table at a time: which rows each table keeps
    (`sel`), the counters of the events none keeps, and the column readers the tables share."""

    def __init__(self, n: int, arrays: dict, strings: list, raws: list) -> None:
        self.arrays, self.strings, self.raws = arrays, strings, raws
        strings.append("")  # id -1 ("absent") -> ""
        # two raw spans can decode to one string (an escape): one canonical id per distinct string
        canon, uniq = pd.factorize(np.array(strings, dtype=object), use_na_sentinel=False)
        self.uniq = list(uniq)
        self.canon = canon.astype(np.int64)
        self.ph = arrays["ph"]
        self.has_args = arrays["has_args"].astype(bool)
        self.cat = self.sid("cat_idx")
        self.name = self.sid("name_idx")
        self.ts, self.dur, self.present = arrays["ts"], arrays["dur"], arrays["present"]
        self.beyond = _Beyond()
        # kind per distinct category (CATEGORY, case-insensitive)
        cat_kind = np.array([_KIND_CODE.get(CATEGORY.get(c.lower()), -1) for c in self.uniq], dtype=np.int64)
        self.kind = kind = cat_kind[self.cat] if n else np.empty(0, dtype=np.int64)
        dur = self.dur
        timed = (self.ph == ord("X")) & (kind >= 0)
        has_dur = ~np.isnan(dur)
        self.x_ok = timed & has_dur & ~(dur < 0)
        self.no_dur = int(np.count_nonzero(timed & ~has_dur))
        self.neg_dur = int(np.count_nonzero(timed & has_dur & (dur < 0)))
        self.unknown: dict[str, int] = {}
        unk = (self.ph == ord("X")) & (kind < 0)
        if unk.any():
            ucodes, ucats = pd.factorize(self.cat[unk])
            for c, k in zip(ucats, np.bincount(ucodes)):
                if self.uniq[c]:
                    self.unknown[self.uniq[c]] = int(k)

    def string_id(self, s: str) -> int:
        """The canonical id of a string of the chunk, -2 where it has none."""
        return self.uniq.index(s) if s in self.uniq else -2

    def col(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def sid(self, name: str) -> np.ndarray:
        """canonical string ids, "absent" -> the id of \"\""""
        return self.canon[self.arrays[name]]

    def sel(self, k: str) -> np.ndarray:
        ph, kind = self.ph, self.kind
        m = self.x_ok & (kind == _KIND_CODE[k])
        if k == "flow":
            m |= ((ph == ord("s")) | (ph == ord("f"))) & (kind == _KIND_CODE["flow"])
        elif k == "instant":
            m |= ((ph == ord("i")) | (ph == ord("I"))) & (self.name == self.string_id("[memory]"))
        return np.flatnonzero(m)

    def given(self, name: str, idx) -> np.ndarray:
        return (self.present[idx] >> _PRESENT_BIT[name]) & 1 == 1

    def opt(self, name: str, idx, default=-1) -> np.ndarray:
        return np.where(self.given(name, idx), self.col(name)[idx], default)

    def ids(self, name: str, idx, absent=None, count=True) -> np.ndarray:
        """pid/tid/id columns: ints as they are, strings through _tid_checked (per distinct string)."""
        v = self.col(name)[idx]
        s_ = self.col(name + "_str")[idx]
        if absent is not None:
            v = np.where(self.given(name, idx), v, absent)
        if (s_ >= 0).any():
            for u in np.unique(s_[s_ >= 0]):  # v is already a copy (fancy indexing)
                at = s_ == u
                val, out_of_range = _tid_checked(self.strings[u])
                v[at] = val
                if out_of_range and count:
                    self.beyond.n += int(np.count_nonzero(at))
        return v

    def base(self, idx) -> dict:
        codes, u = pd.factorize(self.name[idx], use_na_sentinel=False)
        return {
            "ts_us": self.ts[idx],
            "dur_us": self.dur[idx],
            "name": (codes.astype(np.int32), [self.uniq[c] for c in u]),
        }

    def ext(self, idx) -> np.ndarray:
        e = np.where(
            self.given("external_id", idx),
            self.col("external_id")[idx],
            np.where(self.given("external_id_old", idx), self.col("external_id_old")[idx], -1),
        )
        return np.where(self.has_args[idx], e, -1)

    def gpu(self, idx) -> dict:
        stream = self.col("stream")[idx]
        has_stream = self.given("stream", idx)
        return {
            # string pids are 0 here: a device falls back to an int pid only
            "device": np.where(self.given("device", idx), self.col("device")[idx], self.col("pid")[idx]),
            "stream": np.where(has_stream, stream, self.ids("tid", idx)) if not has_stream.all() else stream,
            "correlation": self.opt("correlation", idx),
            "external_id": self.ext(idx),
        }

    def strs(self, name: str, idx) -> np.ndarray:
        v = self.col(name)[idx]
        out = np.array(self.strings, dtype=object)[v]
        out[v < 0] = None
        return out


def _gpu_tables(lay: _Layout) -> dict:
    """kernel (with the collectives' args), memcpy (and memset), gpu_annotation and sync."""
    k = lay.sel("kernel")
    kern = {**lay.base(k), **lay.gpu(k), "grid_blocks": lay.col("grid")[k], "block_threads": lay.col("block")[k]}
    if (lay.col("collective_idx")[k] < 0).all():
        kern.update(_no_collectives(len(k)))
    else:
        kern.update(
            {
                "collective": lay.strs("collective_idx", k),
                "in_msg_nelems": lay.opt("in_msg_nelems", k),
                "out_msg_nelems": lay.opt("out_msg_nelems", k),
                "group_size": lay.opt("group_size", k),
                "comm_dtype": lay.strs("dtype_idx", k),
            }
        )
    mc, ms = lay.sel("memcpy"), lay.sel("memset")
    m = np.concatenate([mc, ms])
    nb = lay.col("nbytes")[m]
    g, sy = lay.sel("gpu_annotation"), lay.sel("sync")
    return {
        "kernel": kern,
        "memcpy": {
            **lay.base(m),
            **lay.gpu(m),
            "size_bytes": np.where(np.isnan(nb), 0.0, nb),
            "is_memset": np.arange(len(m)) >= len(mc),
        },
        "gpu_annotation": {**lay.base(g), **lay.gpu(g)},
        "sync": {
            **lay.base(sy),
            **lay.gpu(sy),
            "wait_on_stream": lay.opt("wait_on_stream", sy),
            "wait_record_corr": lay.opt("wait_on_record", sy),
        },
    }


def _host_tables(lay: _Layout) -> dict:
    """runtime, cpu_op (and CPU user annotations, with their raw shapes) and python."""
    r = lay.sel("runtime")
    cb = np.where(lay.given("cbid", r), lay.col("cbid")[r], np.where(lay.given("cid", r), lay.col("cid")[r], -1))
    co, an = lay.sel("cpu_op"), lay.sel("annotation")
    c = np.concatenate([co, an])
    raw_obj = np.empty(len(lay.raws) + 1, dtype=object)  # shared bytes objects; id -1 -> None (last)
    raw_obj[: len(lay.raws)] = lay.raws
    p = lay.sel("python")
    return {
        "runtime": {
            **lay.base(r),
            "tid": lay.ids("tid", r),
            "correlation": lay.opt("correlation", r),
            "external_id": lay.ext(r),
            "cbid": cb,
        },
        "cpu_op": {
            **lay.base(c),
            "tid": lay.ids("tid", c),
            "external_id": lay.ext(c),
            "is_annotation": np.arange(len(c)) >= len(co),
            "input_dims_raw": raw_obj[lay.col("dims_idx")[c]],
            "input_type_raw": raw_obj[lay.col("type_idx")[c]],
            "flops": lay.col("flops")[c],
        },
        "python": {**lay.base(p), "tid": lay.ids("tid", p)},
    }


def _instant_and_flow_tables(lay: _Layout) -> dict:
    """memory ([memory] instants) and flow (launch flows' start and finish)."""
    i = lay.sel("instant")

    def zero_nan(name):
        v = lay.col(name)[i]
        return np.where(np.isnan(v), 0.0, v)

    f = lay.sel("flow")
    return {
        "memory": {
            "ts_us": lay.ts[i],
            "alloc_bytes": zero_nan("mem_bytes"),
            "total_allocated_bytes": zero_nan("total_allocated"),
            "total_reserved_bytes": zero_nan("total_reserved"),
            "device_type": lay.opt("device_type", i),
            "device_id": lay.opt("device_id", i),
        },
        "flow": {
            "id": lay.ids("id", f, absent=-1),
            "is_start": lay.ph[f] == ord("s"),
            "ts_us": lay.ts[f],
            "tid": lay.ids("tid", f),
        },
    }


def _thread_names(lay: _Layout) -> dict:
    """(pid, tid) -> name, from the thread_name metadata events."""
    threads = {}
    tm = np.flatnonzero((lay.ph == ord("M")) & (lay.name == lay.string_id("thread_name")))
    if len(tm):
        an_ = lay.col("arg_name_idx")[tm]
        pids, tids = lay.ids("pid", tm, count=False), lay.ids("tid", tm, count=False)  # labels only
        for a, pv, tv in zip(an_.tolist(), pids.tolist(), tids.tolist()):
            if a >= 0 and lay.strings[a]:
                threads[(pv, tv)] = lay.strings[a]
    return threads


_TIMED = ("kernel", "memcpy", "cpu_op", "runtime", "gpu_annotation", "python")
_KINDS = ("kernel", "memcpy", "gpu_annotation", "sync", "runtime", "cpu_op", "python", "memory", "flow")


def _concat_names(parts: list[tuple[np.ndarray, list]]) -> pd.Categorical:
    cats = pd.Index(pd.unique(np.array([u for _, uniq in parts for u in uniq], dtype=object)))
    if not len(cats):
        return pd.Categorical([])
    codes = [cats.get_indexer(pd.Index(uniq, dtype=object)).astype(np.int32)[c] for c, uniq in parts if len(c)]
    allc = np.concatenate(codes) if codes else np.empty(0, dtype=np.int32)
    return pd.Categorical.from_codes(allc, categories=cats)


def _merge_kind(pieces: list[dict], origin: float) -> pd.DataFrame:
    """One kind's columns of every chunk -> its DataFrame, times relative to origin. The peak stays
    near one copy of the table: each column's pieces are dropped as soon as they are concatenated (a
    lone chunk's array that owns its memory is used as it is), the time shift is made in place, and
    the DataFrame takes the arrays without copying them into a block of its own (pd.DataFrame(dict)
    would copy them all)."""
    cols: dict = {}
    for col in list(pieces[0]):
        vals = [piece.pop(col) for piece in pieces]
        if col == "name":
            cols[col] = _concat_names(vals)
        elif len(vals) == 1 and vals[0].base is None and vals[0].flags.writeable:
            cols[col] = vals[0]
        else:
            cols[col] = np.concatenate(vals)
        del vals
        if col == "ts_us":
            # -0.0 - 0.0 is -0.0; adding +0.0 makes it 0.0
            cols[col] -= origin
            cols[col] += 0.0
        elif col == "dur_us":
            cols["end_us"] = cols["ts_us"] + cols["dur_us"]
    return pd.DataFrame(cols, copy=False)


def assemble(partials: list[dict]) -> Tables:
    """Chunk columns -> Tables: concatenate, shift times to the earliest event, link, warn. The
    partials' tables are consumed (emptied) as they are assembled, so their memory goes as the
    tables' arrives."""
    if not partials:
        partials = [extract_events([])]
    firsts = [float(p["tables"][k]["ts_us"].min()) for p in partials for k in _TIMED if len(p["tables"][k]["ts_us"])]
    # + 0.0 turns -0.0 into 0.0: JSON's integer -0 is -0.0 to the native reader's strtod and 0 to
    # Python's int, and the readers must agree to the bit
    origin = min(firsts) + 0.0 if firsts else 0.0
    merged: dict[str, pd.DataFrame] = {}
    for kind in _KINDS:
        merged[kind] = _merge_kind([p["tables"].pop(kind) for p in partials], origin)

    m = merged["memcpy"]
    if len(m):
        cats = m["name"].cat.categories
        parsed = []
        for n in cats:
            mt = _MEMCPY_NAME.match(n)
            parsed.append(
                (mt.group(1), mt.group(2), mt.group(3))
                if mt
                else ("memset" if n.startswith("Memset") else "unknown", "", "")
            )
        codes = m["name"].cat.codes.to_numpy()
        for i, col in enumerate(("kind", "src_kind", "dst_kind")):
            per_cat = np.array([p[i] for p in parsed], dtype=object)
            m[col] = pd.Categorical(per_cat[codes])
    else:
        for col in ("kind", "src_kind", "dst_kind"):
            m[col] = pd.Categorical([])

    warnings: list[str] = []
    unknown: dict[str, int] = {}
    threads: dict = {}
    for p in partials:
        for k, v in p["unknown"].items():
            unknown[k] = unknown.get(k, 0) + v
        threads.update(p["threads"])
    no_dur = sum(p["no_dur"] for p in partials)
    neg_dur = sum(p["neg_dur"] for p in partials)
    beyond = sum(p.get("ids_beyond_int64", 0) for p in partials)
    if beyond:
        warnings.append(
            f"{beyond} pid/tid/stream/flow id values were numbers beyond int64 written as strings and were "
            "read as absent (no thread, stream or flow link); the rest of each event was kept"
        )
    if no_dur:
        warnings.append(f"{no_dur} complete events had no 'dur' and were left out of the timeline")
    if neg_dur:
        warnings.append(f"{neg_dur} events had a negative duration and were left out of the timeline")
    if unknown:
        top = ", ".join(f"{k} ({v})" for k, v in sorted(unknown.items(), key=lambda kv: -kv[1])[:5])
        warnings.append(f"events of unrecognised categories were ignored: {top}")

    kernels, memcpy, runtime, cpu_ops, gpu_annotations, python, sync = (
        _sorted(merged[k]) for k in ("kernel", "memcpy", "runtime", "cpu_op", "gpu_annotation", "python", "sync")
    )
    _link(kernels, runtime, cpu_ops)
    _link(memcpy, runtime, cpu_ops)
    return Tables(
        kernels=kernels,
        memcpy=memcpy,
        runtime=runtime,
        cpu_ops=cpu_ops,
        gpu_annotations=gpu_annotations,
        python=python,
        sync=sync,
        memory=merged["memory"],
        flows=merged["flow"],
        thread_names=threads,
        origin_us=origin,
        n_events=sum(p["n_events"] for p in partials),
        warnings=warnings,
    )


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    ts = df["ts_us"].to_numpy()
    if ts.size < 2 or bool(np.all(ts[1:] >= ts[:-1])):
        return df
    return df.sort_values("ts_us", kind="stable").reset_index(drop=True)


def _prod(v) -> int:
    """The product of a grid/block triple, 0 (absent) when a component is not an integer or the product
    leaves int64 (CUDA caps a grid at 2^31-1 x 65535 x 65535, far inside it): never a crash, never a wrap."""
    if not v:
        return 0
    p = 1
    for x in v:
        try:
            p *= int(x)
        except (TypeError, ValueError, OverflowError):
            return 0
    return p if -_INT64_MAX <= p <= _INT64_MAX else 0


def _link(gpu: pd.DataFrame, runtime: pd.DataFrame, cpu_ops: pd.DataFrame) -> None:
    """Add launch_* columns (the runtime call with the same correlation id) and op_* columns
    (the innermost CPU op whose External id the GPU event or its launch carries)."""
    n = len(gpu)
    launch_idx = np.full(n, -1, dtype=np.int64)
    if n and len(runtime):
        rt = runtime[runtime["correlation"] >= 0]
        m = pd.Series(rt.index.values, index=rt["correlation"].values)
        m = m[~m.index.duplicated(keep="first")]
        launch_idx = m.reindex(gpu["correlation"].values).fillna(-1).to_numpy(dtype=np.int64)
    ok = launch_idx >= 0
    gpu["launch_idx"] = launch_idx
    gpu["launch_ts_us"] = np.where(
        ok, runtime["ts_us"].to_numpy()[np.maximum(launch_idx, 0)] if len(runtime) else np.nan, np.nan
    )
    gpu["launch_dur_us"] = np.where(
        ok, runtime["dur_us"].to_numpy()[np.maximum(launch_idx, 0)] if len(runtime) else np.nan, np.nan
    )
    ext = gpu["external_id"].to_numpy().copy()
    if len(runtime):
        rext = runtime["external_id"].to_numpy()[np.maximum(launch_idx, 0)]
        ext = np.where((ext < 0) & ok, rext, ext)
    gpu["external_id"] = ext
    op_idx = np.full(n, -1, dtype=np.int64)
    if n and len(cpu_ops):
        ops = cpu_ops[(cpu_ops["external_id"] >= 0) & ~cpu_ops["is_annotation"]]
        # External ids can repeat across threads (autograd threads, old Kineto): prefer the op on the
        # launching thread, then any op with that id
        # one int64 key per (thread, External id): tids and ids both fit in 32 bits
        key = (ops["tid"].to_numpy() & 0xFFFFFFFF) << 32 | (ops["external_id"].to_numpy() & 0xFFFFFFFF)
        by_tid = pd.Series(ops.index.values, index=key)
        by_tid = by_tid[~by_tid.index.duplicated(keep="last")]
        any_tid = pd.Series(ops.index.values, index=ops["external_id"].values)
        any_tid = any_tid[~any_tid.index.duplicated(keep="last")]
        op_idx = any_tid.reindex(ext).fillna(-1).to_numpy(dtype=np.int64)
        if len(runtime) and ok.any():
            ltid = runtime["tid"].to_numpy()[np.maximum(launch_idx, 0)]
            lkey = (ltid & 0xFFFFFFFF) << 32 | (ext & 0xFFFFFFFF)
            keyed = by_tid.reindex(lkey).fillna(-1).to_numpy(dtype=np.int64)
            op_idx = np.where(ok & (keyed >= 0), keyed, op_idx)
        # no op carries the launch's External id (traces whose runtime events carry the correlation id
        # there: HTA's and param's DLRM/ResNet samples): the innermost op on the launching thread whose span
        # holds the launch, as the profiler nests them
        miss = (op_idx < 0) & ok
        if miss.any():
            li = launch_idx[miss]
            real = np.flatnonzero(~cpu_ops["is_annotation"].to_numpy())
            op_idx[miss] = _enclosing(
                cpu_ops.index.to_numpy()[real],
                cpu_ops["tid"].to_numpy()[real],
                cpu_ops["ts_us"].to_numpy(dtype=float)[real],
                cpu_ops["end_us"].to_numpy(dtype=float)[real],
                runtime["tid"].to_numpy()[li],
                runtime["ts_us"].to_numpy(dtype=float)[li],
            )
    gpu["op_idx"] = op_idx
    gpu["op_name"] = _names_at(cpu_ops["name"], op_idx) if n else pd.Categorical([])


def _enclosing(index, tid, ts, end, q_tid: np.ndarray, q_ts: np.ndarray) -> np.ndarray:
    """For each query (thread, time): the `index` entry of the innermost op of that thread whose [ts, end]
    holds the time, -1 where none does. Ops on one thread nest (the profiler records a call tree), so the
    innermost holder is the latest-starting op still open: walk up from the latest op that started before
    the time. Only the ops that hold some query take part (the queries' ancestors), so the cost follows
    the unlinked launches, not the trace."""
    out = np.full(len(q_ts), -1, dtype=np.int64)
    for t in np.unique(q_tid):
        q = np.flatnonzero(q_tid == t)
        x = q_ts[q]
        sel = np.flatnonzero(tid == t)
        if not len(sel):
            continue
        xs = np.sort(x)
        holds = np.searchsorted(xs, ts[sel], side="left") < np.searchsorted(xs, end[sel], side="right")
        sel = sel[holds]
        if not len(sel):
            continue
        order = sel[np.lexsort((-end[sel], ts[sel]))]  # by start, the enclosing op first at a tie
        s_ts, s_end, s_idx = ts[order], end[order], index[order]
        parent = np.full(len(order), -1, dtype=np.int64)
        stack: list[int] = []
        for i in range(len(order)):
            while stack and s_end[stack[-1]] < s_ts[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        j = np.searchsorted(s_ts, x, side="right") - 1
        for _ in range(len(order) + 1):  # at most the depth of the call tree
            up = (j >= 0) & (s_end[np.maximum(j, 0)] < x)
            if not up.any():
                break
            j = np.where(up, parent[np.maximum(j, 0)], j)
        out[q] = np.where(j >= 0, s_idx[np.maximum(j, 0)], -1)
    return out


def _names_at(names: pd.Series, idx: np.ndarray) -> pd.Categorical:
    """names[idx] ("" where idx < 0) as a categorical with sorted categories, as
    pd.Categorical(list of str) builds it, without a Python pass per row."""
    codes = names.cat.codes.to_numpy() if len(names) else np.empty(0, dtype=np.int64)
    cats = names.cat.categories if len(names) else pd.Index([], dtype=object)
    sel = np.where(idx >= 0, codes[np.maximum(idx, 0)] if len(codes) else -1, -1)
    used, inv = np.unique(sel, return_inverse=True)
    labels = np.array(["" if c < 0 else cats[c] for c in used], dtype=object)
    order = np.argsort(labels, kind="stable")
    # distinct codes can share a label only through "" (a real op named ""): merge them
    sorted_labels = labels[order]
    first = np.r_[True, sorted_labels[1:] != sorted_labels[:-1]] if len(labels) else np.empty(0, dtype=bool)
    pos_sorted = np.cumsum(first) - 1
    pos = np.empty(len(labels), dtype=np.int64)
    pos[order] = pos_sorted
    return pd.Categorical.from_codes(pos[inv.ravel()], categories=pd.Index(list(sorted_labels[first])))
