"""Differential fuzzing: the native scanner and the pure-Python (msgspec) reader must accept and reject
the same inputs and give the same tables, metadata and warnings (issue 11, "one truth").

Inputs are small real-looking traces (sample_traces/ and tests/builders.py) mutated toward the known
classes of disagreement: repeated keys, escapes, invalid UTF-8, integers at and beyond int64, deep
nesting, long number tokens, truncation, byte flips, a repeated top-level "traceEvents".

Two levels, both seeded and bounded by a count (no clock):
- chunk level (FUZZ_CHUNKS inputs): one JSON array of events through `stream._native_chunk` and
  through the Python branch of `stream._parse_chunk`. Where the scanner accepts, the Python reader must
  accept and give equal columns; where it defers (None), the Python reader decides, by design.
- file level (FUZZ_FILES inputs): whole documents (object or bare array, plain or gzip, cut into small
  chunks) through `load_trace` with TRACEINSPECT_NATIVE=0 and =1: equal tables, meta and warnings, or
  the same error message.
Defaults: 1,500 chunk inputs + 60 files, 3 s + 4 s on the shared 2-core dev machine (load 3.5). A local campaign runs the same code with
TRACEINSPECT_FUZZ_SEED / TRACEINSPECT_FUZZ_CHUNKS / TRACEINSPECT_FUZZ_FILES (see docs/tables.md).
A disagreement prints the seed and case number; the minimal input becomes a file in
tests/corpus/readers/ (checked by test_reader_corpus below).
"""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from builders import build_dataloader_stall, build_healthy
from traceinspect.errors import TraceError
from traceinspect.trace import load as L
from traceinspect.trace import stream
from traceinspect.trace.model import load_trace

if stream._scan is None:
    if os.environ.get("TRACEINSPECT_REQUIRE_NATIVE") == "1":
        raise RuntimeError("TRACEINSPECT_REQUIRE_NATIVE=1 but traceinspect.trace._scan was not built")
    pytest.skip("the native scanner was not built (no C compiler at install time)", allow_module_level=True)

SEED = int(os.environ.get("TRACEINSPECT_FUZZ_SEED", "20261203"))
FUZZ_CHUNKS = int(os.environ.get("TRACEINSPECT_FUZZ_CHUNKS", "1500"))
FUZZ_FILES = int(os.environ.get("TRACEINSPECT_FUZZ_FILES", "60"))
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
CORPUS = Path(__file__).parent / "corpus" / "readers"
TABLES = ("kernels", "memcpy", "runtime", "cpu_ops", "gpu_annotations", "python", "sync", "memory", "flows")


# ---- seeds: small real-looking documents ----------------------------------------------------------


def _seed_docs() -> list[dict]:
    docs = [build_healthy(steps=2).build(), build_dataloader_stall(steps=2, load_us=500).build()]
    for p in sorted(SAMPLES.glob("*.json.gz")):
        d = json.loads(gzip.decompress(p.read_bytes()))
        ev = d["traceEvents"]
        # a window of events of every kind: the first ones (metadata, steps) and some from the middle
        d["traceEvents"] = ev[:40] + ev[len(ev) // 2 : len(ev) // 2 + 40]
        docs.append(d)
    return docs


# ---- mutations, one per class of disagreement -----------------------------------------------------

EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s"]
ARGS_KEYS = [
    "correlation",
    "External id",
    "external id",
    "device",
    "stream",
    "cbid",
    "cid",
    "bytes",
    "grid",
    "block",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Input Dims",
    "Input dims",
    "Input type",
    "name",
    "Bytes",
    "Total Allocated",
    "Total Reserved",
    "Device Type",
    "Call stack",
]
INTS = [
    "0",
    "-1",
    "7",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1" + "0" * 30,
    "1" * 400,
]
FLOATS = [
    "1.5",
    "1.00000000000000000000001",
    "12345678901234567.891",
    "1e308",
    "1e400",
    "-0.0",
    "15E-4",
    "0." + "0" * 300 + "1",
    "1" + "0" * 350,
    "2.5e-320",
]
OTHERS = ["null", "true", '"7"', '"x"', '"stream 7"', "[]", "[1, 2]", "[128, 1, 1]", "{}", '{"a": 1}', '""']
ESCAPES = [
    r"\n",
    r"\/",
    r"\u00e9",
    r"\ud83d\ude00",
    r"\u0000",
    r"\"",
    r"\\",
    r"\q",
    r"\u12g4",
    r"\ud800",
    r"\udc00",
    r"\ud800\u0041",
    r"\ud800\ud800",
    r"\U0041",
    "\\",
    r"\u",
    r"\ud83d",
]
UTF8 = [
    b"\xc3\xa9",
    b"\xc0\xaf",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x80",
    b"\xe2\x82",
    b"\xff",
    b"\xf0\x9f\x98\x80",
    b"\x7f",
    b"\x01",
]


def _value(rng: random.Random) -> str:
    pool = rng.choice((INTS, FLOATS, OTHERS))
    return rng.choice(pool)


def _string(rng: random.Random) -> bytes:
    parts = [b"k"]
    valid = rng.random() < 0.6  # most strings stay valid, so that the values get compared too
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.6:
            parts.append(rng.choice(ESCAPES[:7] if valid else ESCAPES).encode())
        else:
            parts.append(rng.choice(UTF8[:1] + UTF8[8:10] if valid else UTF8))
    return b'"' + b"".join(parts) + b'"'


def _nested(rng: random.Random, inner: bytes) -> bytes:
    # the events array sits 2 levels deep, an args value 4: around MAX_NESTING from there
    k = rng.choice(
        [
            3,
            L.MAX_NESTING - 6,
            L.MAX_NESTING - 5,
            L.MAX_NESTING - 4,
            L.MAX_NESTING - 3,
            L.MAX_NESTING - 2,
            L.MAX_NESTING,
            2000,
        ]
    )
    if rng.random() < 0.5:
        return b"[" * k + inner + b"]" * k
    return b'{"a":' * k + inner + b"}" * k


def _member(rng: random.Random, in_args: bool) -> bytes:
    key = rng.choice(ARGS_KEYS if in_args else EVENT_KEYS)
    r = rng.random()
    if r < 0.2:
        key_raw = _string(rng)  # an escaped or badly encoded key
    elif r < 0.3:
        key_raw = json.dumps(key).encode().replace(key[-1:].encode(), b"\\u%04x" % ord(key[-1]), 1)
    else:
        key_raw = json.dumps(key).encode()
    r = rng.random()
    if r < 0.6:
        val = _value(rng).encode()
    elif r < 0.8:
        val = _string(rng)
    else:
        val = _nested(rng, _value(rng).encode())
    return key_raw + b": " + val


def _mutate_event(rng: random.Random, ev: dict) -> bytes:
    """One event re-serialised with extra members (repeated keys land before or after the original)."""
    body = json.dumps(ev).encode()
    for _ in range(rng.choice((1, 1, 2, 3))):
        in_args = rng.random() < 0.5 and body.find(b'"args": {') >= 0
        m = _member(rng, in_args)
        if in_args:
            at = body.find(b'"args": {') + len(b'"args": {')
            body = body[:at] + m + (b", " if body[at : at + 1] != b"}" else b"") + body[at:]
        elif rng.random() < 0.5:
            body = b"{" + m + (b", " if len(body) > 2 else b"") + body[1:]
        else:
            body = body[:-1] + (b", " if len(body) > 2 else b"") + m + b"}"
    return body


def _mutate_bytes(rng: random.Random, b: bytes) -> bytes:
    b = bytearray(b)
    r = rng.random()
    if r < 0.4:  # truncation
        return bytes(b[: rng.randrange(1, len(b))])
    for _ in range(rng.randint(1, 4)):  # flips, deletions, insertions
        pos = rng.randrange(len(b))
        op = rng.random()
        if op < 0.5:
            b[pos] = rng.choice(b'{}[],:"0123456789.eE+-\\ \nntfu\x00\x1f\xff\x80')
        elif op < 0.75:
            del b[pos : pos + rng.randint(1, 20)]
        else:
            b[pos:pos] = rng.choice([b"\\", b'"', b"[", b"{", b"\\u", b"\xed\xa0\x80", b"-", b"e5"])
    return bytes(b)


def _events_array(rng: random.Random, events: list[dict]) -> bytes:
    k = rng.randint(1, min(12, len(events)))
    start = rng.randrange(0, len(events) - k + 1)
    parts = []
    for ev in events[start : start + k]:
        parts.append(_mutate_event(rng, ev) if rng.random() < 0.3 else json.dumps(ev).encode())
    data = b"[" + b", ".join(parts) + b"]"
    if rng.random() < 0.15:
        data = _mutate_bytes(rng, data)
    return data


# ---- comparison ----------------------------------------------------------------------------------


def _equal(a, b, where="") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        if a.dtype == object:
            assert [x for x in a] == [x for x in b], where
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _python_chunk(data: bytes, monkeypatch) -> dict:
    monkeypatch.setenv("TRACEINSPECT_NATIVE", "0")
    try:
        return stream._parse_chunk(data)
    finally:
        monkeypatch.setenv("TRACEINSPECT_NATIVE", "1")


def check_chunk(data: bytes, monkeypatch) -> str:
    """'both' (accepted by both, equal), 'deferred' (the scanner left it to Python) or 'rejected'."""
    try:
        nat = stream._native_chunk(data)
    except RecursionError:  # pragma: no cover - the reason this test exists
        raise AssertionError("RecursionError in the native path")
    py = _python_chunk(data, monkeypatch)
    if nat is None:
        return "rejected" if "error" in py else "deferred"
    assert "error" not in py, f"the scanner accepted what the Python reader rejects: {py['error']}"
    nat.setdefault("dropped", 0)
    _equal(py, nat)
    return "both"


def _load(path, native: bool, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_NATIVE", "1" if native else "0")
    try:
        return load_trace(path)
    except TraceError as e:
        assert "\n" not in str(e) and str(path) in str(e)
        return "error: " + str(e)


def check_file(path: Path, monkeypatch):
    py, nat = _load(path, False, monkeypatch), _load(path, True, monkeypatch)
    if isinstance(py, str) or isinstance(nat, str):
        assert py == nat
        return py
    for name in TABLES:
        pd.testing.assert_frame_equal(
            getattr(py.tables, name), getattr(nat.tables, name), check_exact=True, obj=f"{path.name}:{name}"
        )
    for attr in ("thread_names", "origin_us", "n_events", "warnings"):
        assert getattr(py.tables, attr) == getattr(nat.tables, attr), attr
    assert py.warnings == nat.warnings
    assert py.meta == nat.meta
    return nat


# ---- the tests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeds():
    return _seed_docs()


def test_chunks_native_and_python_agree(seeds, monkeypatch):
    rng = random.Random(SEED)
    outcome = {"both": 0, "deferred": 0, "rejected": 0}
    for i in range(FUZZ_CHUNKS):
        doc = rng.choice(seeds)
        data = _events_array(rng, doc["traceEvents"])
        try:
            outcome[check_chunk(data, monkeypatch)] += 1
        except AssertionError as e:
            raise AssertionError(f"seed {SEED} case {i}: {data[:2000]!r}") from e
    # not vacuous: a good share is read natively and checked value by value, and some are rejected
    assert outcome["both"] > FUZZ_CHUNKS // 4 and outcome["rejected"] > 0, outcome


def _document(rng: random.Random, doc: dict) -> bytes:
    d = dict(doc)
    events = d.pop("traceEvents")
    k = rng.randint(1, len(events))
    body = _events_array(rng, events[:k]) if rng.random() < 0.7 else json.dumps(events[:k]).encode()
    r = rng.random()
    if r < 0.1:
        return body  # a bare array
    meta = json.dumps(d).encode()[1:-1]
    other = json.dumps(events[k : k + 5]).encode()
    if r < 0.3:  # a second traceEvents, before or after
        parts = [b'"traceEvents": ' + body, b'"traceEvents": ' + other]
        if rng.random() < 0.5:
            parts.reverse()
        if rng.random() < 0.3:
            parts[1] = parts[1].replace(b"traceEvents", b"trace\\u0045vents")
        data = b"{" + meta + b", " + b", ".join(parts) + b"}"
    elif r < 0.45:  # repeated or deep metadata keys after the events
        extra = rng.choice(
            [
                b'"schemaVersion": null',
                b'"baseTimeNanoseconds": 17',
                b'"displayTimeUnit": "ns"',
                b'"deviceProperties": ' + _nested(rng, b"[]"),
                b'"zz": ' + _string(rng),
                b'"baseTimeNanoseconds": 18446744073709551616',
            ]
        )
        data = b"{" + meta + b', "traceEvents": ' + body + b", " + extra + b"}"
    else:
        data = b"{" + meta + b', "traceEvents": ' + body + b"}"
    if rng.random() < 0.3:
        data = _mutate_bytes(rng, data)
    return data


def test_files_native_and_python_agree(seeds, tmp_path, monkeypatch):
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 2048)  # many blocks and chunks even in small files
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    rng = random.Random(SEED + 1)
    for i in range(FUZZ_FILES):
        data = _document(rng, rng.choice(seeds))
        gz = rng.random() < 0.25
        p = tmp_path / f"case{i}.json{'.gz' if gz else ''}"
        p.write_bytes(gzip.compress(data) if gz else data)
        try:
            check_file(p, monkeypatch)
        except AssertionError as e:
            raise AssertionError(f"seed {SEED + 1} case {i}: {data[:3000]!r}") from e


# ---- the committed corpus: one file per disagreement found, with what both readers must say --------


def _corpus():
    return sorted(p for p in CORPUS.glob("*.json") if p.name != "EXPECT.json")


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.stem)
def test_reader_corpus(path, monkeypatch):
    expect = json.loads((CORPUS / "EXPECT.json").read_text())[path.name]
    got = check_file(path, monkeypatch)
    if "error" in expect:
        assert isinstance(got, str) and expect["error"] in got, got
    else:
        assert not isinstance(got, str), got
        for table_col, value in expect.get("values", {}).items():
            table, col = table_col.split(".")
            assert getattr(got, table)[col].tolist() == value, table_col
        for w in expect.get("warnings", []):
            assert any(w in x for x in got.warnings), got.warnings
        for attr, value in expect.get("meta", {}).items():
            assert getattr(got.meta, attr) == value, attr


def test_nesting_limit_is_the_same_in_both_readers():
    assert stream._scan.MAX_NESTING == L.MAX_NESTING


def test_dropped_events_are_one_warning_across_chunks(tmp_path, monkeypatch):
    """Found by the file-level campaign (seed 16): an event dropped in a chunk and one in the tail gave
    two warnings "1 events ... dropped" in the Python reader and one "2 events ..." natively."""
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(300)
    ]
    data = json.dumps({"traceEvents": events}).encode()
    # two events with a tid beyond int64: the 6th (in the first chunk) and the last (in the tail)
    for name in (b'"op5"', b'"op299"'):
        data = data.replace(name + b', "pid": 1, "tid": 1', name + b', "pid": 1, "tid": 18446744073709551616')
    p = tmp_path / "drops.json"
    p.write_bytes(data)
    tr = check_file(p, monkeypatch)
    # the tid alone is ignored (each event kept), and the two are one warning
    assert [w for w in tr.warnings if "unexpected types" in w] == [
        "2 events had fields of unexpected types (or integers beyond int64) that were ignored; "
        "the rest of each event was kept"
    ]
    assert len(tr.cpu_ops) == 300


def _depth_reference(b: bytes, limit: int):
    """The first byte opening a container limit+1 deep, byte by byte (the JSON string rules)."""
    depth, in_string, escaped = 0, False, False
    for i, c in enumerate(b):
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in b"[{":
            depth += 1
            if depth > limit:
                return i
        elif c in b"]}":
            depth -= 1
    return None


def test_nesting_error_matches_a_byte_by_byte_reference(monkeypatch):
    """load.nesting_error (the quick path, and the blockwise numpy path across block edges) against a
    plain loop, on random JSON whose strings hold brackets, quotes and runs of backslashes."""
    rng = random.Random(SEED + 2)
    texts = ["a[", '{"', "\\", "\\\\", '\\"{', "]]", "x", "", "\\\\\\"]

    def gen(d):
        r = rng.random()
        if d > 7 or r < 0.3:
            return rng.choice(texts + [1, None])
        if r < 0.65:
            return [gen(d + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(texts): gen(d + 1) for _ in range(rng.randint(0, 3))}

    checked = 0
    for _ in range(600):
        monkeypatch.setattr(L, "_NESTING_BLOCK", rng.choice([1, 2, 3, 7, 64, 1 << 20]))
        b = json.dumps(gen(0)).encode()
        limit = rng.randint(0, 8)
        assert L.nesting_error(b, limit) == _depth_reference(b, limit), (b, limit)
        checked += _depth_reference(b, limit) is not None
    assert checked > 50  # both outcomes are exercised
