"""The native scanner (traceinspect/trace/_scan.c) must give exactly the tables of the pure-Python
decoder: on every real trace, on hand-made edge cases (escapes, string ids, wrong types, old
spellings, big numbers), chunk by chunk in threads, and on broken bytes.

Skipped where the extension was not built (no C compiler); TRACEINSPECT_REQUIRE_NATIVE=1 (set by
.ci/run) turns that skip into a failure.
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

from builders import build_healthy
from traceinspect.errors import TraceError
from traceinspect.trace import stream
from traceinspect.trace.model import load_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

if stream._scan is None:
    if os.environ.get("TRACEINSPECT_REQUIRE_NATIVE") == "1":
        raise RuntimeError("TRACEINSPECT_REQUIRE_NATIVE=1 but traceinspect.trace._scan was not built")
    pytest.skip("the native scanner was not built (no C compiler at install time)", allow_module_level=True)

TABLES = ("kernels", "memcpy", "runtime", "cpu_ops", "gpu_annotations", "python", "sync", "memory", "flows")


def _tables(path, native: bool, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_NATIVE", "1" if native else "0")
    try:
        tr = load_trace(path)
    except TraceError as e:
        return ("error", str(e))
    return tr


def assert_same(path, monkeypatch):
    py = _tables(path, False, monkeypatch)
    nat = _tables(path, True, monkeypatch)
    if isinstance(py, tuple) or isinstance(nat, tuple):
        assert py == nat
        return nat
    for name in TABLES:
        a, b = getattr(py.tables, name), getattr(nat.tables, name)
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f"{Path(path).name}:{name}")
    for attr in ("thread_names", "origin_us", "n_events", "warnings"):
        assert getattr(py.tables, attr) == getattr(nat.tables, attr), attr
    assert py.warnings == nat.warnings
    assert py.meta == nat.meta
    return nat


def _real_traces():
    files = (
        sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")) and p.name != "EXPECTED.json")
        if SHARED.exists()
        else []
    )
    return files + sorted(SAMPLES.glob("*.json*"))


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_real_traces_same_tables(path, monkeypatch):
    assert_same(path, monkeypatch)


@pytest.mark.parametrize("path", _real_traces()[:12] if SHARED.exists() else [], ids=lambda p: p.name)
def test_real_traces_in_small_chunks(path, monkeypatch):
    """Many chunks, decoded on the scanner threads, then the native tail."""
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1 << 17)
    assert_same(path, monkeypatch)


def _write(tmp_path, events, name="t.json", raw: bytes | None = None, **top):
    p = tmp_path / name
    p.write_bytes(raw if raw is not None else json.dumps({"traceEvents": events, **top}).encode())
    return p


def _base_events():
    return build_healthy(steps=3).build()["traceEvents"]


def test_escapes_and_unicode_in_strings(tmp_path, monkeypatch):
    ev = _base_events()
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    ops[1]["name"] = 'aten::\u00e9t\u00e9 "quoted" \\ back'
    ops[2]["name"] = "tab\there"
    raw = json.dumps({"traceEvents": ev}, ensure_ascii=True).encode()
    raw = raw.replace(b'"cpu_op"', b'"cpu_\\u006fp"', 3)  # the same string, spelled with an escape
    nat = assert_same(_write(tmp_path, None, raw=raw), monkeypatch)
    names = set(nat.tables.cpu_ops["name"].astype(str))
    assert 'aten::\u00e9t\u00e9 "quoted" \\ back' in names and "tab\there" in names
    # the categories spelled with an escape were recognised: every cpu_op event is in the table
    assert (~nat.tables.cpu_ops["is_annotation"]).sum() == len(ops)


def test_string_ids_old_spellings_and_nulls(tmp_path, monkeypatch):
    ev = _base_events()
    for e in ev:
        if e.get("cat") == "cpu_op":
            e["tid"] = str(e["tid"])
            a = e.get("args") or {}
            if "External id" in a:
                a["external id"] = a.pop("External id")  # the 2020 spelling
            a["Input dims"] = [[2, 3], []]
        if e.get("cat") == "kernel":
            e["args"]["stream"] = None
            e["tid"] = "stream 7"
    ev.append(
        {"ph": "X", "cat": "cpu_op", "name": "no_args", "pid": "Spans", "tid": "x", "ts": 5, "dur": 1, "args": None}
    )
    ev.append({"ph": "M", "name": "thread_name", "pid": 4242, "tid": "4242", "args": {"name": "main"}})
    ev.append({"ph": "s", "cat": "ac2g", "id": "17", "pid": 1, "tid": 2, "ts": 3, "name": "f"})
    ev.append({"ph": "f", "cat": "ac2g", "id": None, "pid": 1, "tid": 2, "ts": 4, "name": "f", "bp": "e"})
    nat = assert_same(_write(tmp_path, ev), monkeypatch)
    assert (nat.tables.kernels["stream"] == 7).all()
    assert nat.tables.thread_names


def test_numbers_edge_cases(tmp_path, monkeypatch):
    ev = _base_events()
    ev[3]["ts"] = 1.7e15 + 0.125  # exact fast path
    ev[4]["ts"] = 12345678901234567.891  # more than 19 digits: the slow, correctly rounded path
    ev[5]["dur"] = 1.5e-3
    ev[6]["dur"] = -2  # negative: left out, and counted
    ev[7].pop("dur", None)  # missing: left out, and counted
    ev.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 9,
            "dur": 2,
            "args": {"bytes": 18446744073709551616, "correlation": 3, "device": 0, "stream": 7},
        }
    )
    raw = json.dumps({"traceEvents": ev}).encode().replace(b'"dur": 0.0015', b'"dur": 15E-4', 1)
    assert_same(_write(tmp_path, None, raw=raw), monkeypatch)


def test_fields_of_unexpected_types_are_decoded_like_the_python_path(tmp_path, monkeypatch):
    """ROCm writes "bytes": "128"; Inductor writes "grid": "grid(100,)"; some events are not objects."""
    ev = _base_events()
    ev.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 7,
            "ts": 9,
            "dur": 2,
            "args": {"bytes": "128", "correlation": 3, "device": 0, "stream": 7},
        }
    )
    ev.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "triton_",
            "pid": 0,
            "tid": 7,
            "ts": 12,
            "dur": 2,
            "args": {"grid": "grid(100,)", "correlation": 4, "device": 0, "stream": 7},
        }
    )
    ev.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "dup",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"External id": 1},
            "args ": {},
        }
    )
    ev.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "float id",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"External id": 5.0},
        }
    )
    raw = json.dumps({"traceEvents": ev}).encode()
    raw = raw.replace(b'"traceEvents": [', b'"traceEvents": [5, "x", [], ', 1)
    nat = assert_same(_write(tmp_path, None, raw=raw), monkeypatch)
    assert nat.tables.memcpy["size_bytes"].max() >= 128


def test_flops_args_are_read_like_the_python_path(tmp_path, monkeypatch):
    """The with_flops `flops` arg (uint64 in torch): small, above int64 and above 19 digits (the slow
    path), null, repeated (last wins), a float, and of unexpected types (a string, a bool: the lenient path)."""
    ev = _base_events()
    values = [8388608, 18446744073709551615, 123456789012345678901234, None, 0, 2.5e12, "4096", True]
    for n, v in enumerate(values):
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 20 + n,
                "dur": 1,
                "args": {"External id": 900 + n, "flops": v},
            }
        )
    raw = json.dumps({"traceEvents": ev}).encode()
    raw = raw.replace(b'"External id": 903, "flops": null', b'"flops": 77, "External id": 903, "flops": null')
    nat = assert_same(_write(tmp_path, None, raw=raw), monkeypatch)
    got = nat.cpu_ops.set_index("external_id")["flops"]
    assert got[900] == 8388608.0 and got[901] == float(18446744073709551615)
    assert got[902] == 1.2345678901234568e23 and np.isnan(got[903]) and got[904] == 0.0 and got[905] == 2.5e12


def test_top_level_keys_after_the_events(tmp_path, monkeypatch):
    doc = build_healthy(steps=3).build()
    ev = doc.pop("traceEvents")
    raw = json.dumps(
        {
            **{k: v for k, v in doc.items() if k != "deviceProperties"},
            "traceEvents": ev,
            "deviceProperties": doc.get("deviceProperties", []),
            "baseTimeNanoseconds": 17,
        }
    ).encode()
    nat = assert_same(_write(tmp_path, None, raw=raw), monkeypatch)
    assert nat.meta.base_time_ns == 17


def test_bare_array_and_gzip(tmp_path, monkeypatch):
    ev = _base_events()
    p = tmp_path / "a.json"
    p.write_bytes(json.dumps(ev).encode())
    assert_same(p, monkeypatch)
    g = tmp_path / "a.json.gz"
    g.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}, indent=2).encode()))
    assert_same(g, monkeypatch)


def test_truncated_and_malformed_files_behave_like_the_python_path(tmp_path, monkeypatch):
    data = json.dumps({"traceEvents": _base_events()}, indent=1).encode()
    rng = random.Random(3)
    for i, cut in enumerate(sorted(rng.sample(range(10, len(data)), 12))):
        assert_same(_write(tmp_path, None, name=f"cut{i}.json", raw=data[:cut]), monkeypatch)
    for i in range(25):
        b = bytearray(data)
        for _ in range(2):
            b[rng.randrange(0, len(b))] = rng.choice(b'{}[],:"0e-\\ \n')
        assert_same(_write(tmp_path, None, name=f"flip{i}.json", raw=bytes(b)), monkeypatch)


def test_scanner_rejects_what_it_cannot_read_without_crashing():
    """Direct calls: malformed input gives None (the Python path then decides), never a crash."""
    scan = stream._scan.scan
    for bad in (
        b"",
        b"[",
        b"[{",
        b'[{"ph":"X",}]',
        b"[1 2]",
        b'[{"a":[1,2}]',
        b"[" * 100000,
        b'[{"name":"\x01"}]',
        b'[{"ts":1e}]',
        b'[{"ts":-}]',
        b'{"ph":"X"}',
    ):
        assert scan(bad) is None, bad
    n, end, cols, strings, raws, deferred = scan(b' [ ] , "x"')
    assert (n, end) == (0, 4)
    n, end, cols, strings, raws, deferred = scan(b'[{"ts": 1.5, "dur": 2}, 7]')
    assert n == 2 and [r for r, _ in deferred] == [1]
    assert np.frombuffer(cols["ts"], dtype=np.float64)[0] == 1.5


def test_scanner_survives_random_mutations():
    """Thousands of mutated event arrays straight into the scanner: it returns None or columns whose
    lengths agree, never crashes. (Run under AddressSanitizer during development, see
    docs/benchmarks.md; here it guards the plain build.)"""
    scan = stream._scan.scan
    rng = random.Random(5)
    src = json.dumps(build_healthy(steps=2).build()["traceEvents"], indent=1).encode()
    for _ in range(1500):
        b = bytearray(src)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(b))
            op = rng.random()
            if op < 0.5:
                b[pos] = rng.choice(b'{}[],:"0123456789.eE+-\\ \nntfaxu\x00\x1f\xff')
            elif op < 0.75:
                del b[pos : pos + rng.randint(1, 40)]
            else:
                b[pos:pos] = bytes(rng.choice(b'{}[],:"0\\e-') for _ in range(rng.randint(1, 5)))
        r = scan(bytes(b))
        if r is not None:
            n, end, cols, strings, raws, deferred = r
            assert 0 <= end <= len(b)
            for c in ("dims_idx", "type_idx"):
                ids = np.frombuffer(cols[c], dtype=np.int32)
                assert len(ids) == n and ((ids >= -1) & (ids < len(raws))).all()
            assert memoryview(cols["ts"]).nbytes == 8 * n and memoryview(cols["ph"]).nbytes == n
            assert all(0 <= row < n for row, _ in deferred)


def test_scanner_checks_escapes_in_every_string():
    """msgspec rejects these escapes even in values it skips; the scanner must not accept them (None:
    the Python path reports the error). Valid escapes in skipped values are accepted."""
    scan = stream._scan.scan
    for esc in (rb"\q", rb"\u12g4", rb"\ud800", rb"\udc00", rb"\ud800\u0041", rb"\U0041", rb"\ud83d\u"):
        for doc in (
            b'[{"zz": "' + esc + b'", "ph": "X"}]',
            b'[{"name": "' + esc + b'"}]',
            b'[{"args": {"Input Dims": ["' + esc + b'"]}}]',
        ):
            assert scan(doc) is None, doc
    for esc in (rb"\n", rb"\/", rb"\u00e9", rb"\ud83d\ude00", rb"\u0000"):
        n, *_ = scan(b'[{"zz": "' + esc + b'", "ph": "X"}]')
        assert n == 1, esc


def test_scanner_presence_bits_keep_int64_min_a_value():
    """-2**63 is a value; only null and absence clear the `present` bit (last occurrence wins)."""
    n, _, cols, _, _, deferred = stream._scan.scan(
        b'[{"args": {"correlation": -9223372036854775808, "device": 3, "device": null}}, {"ph": "X"}]'
    )
    assert n == 2 and not deferred
    corr = np.frombuffer(cols["correlation"], dtype=np.int64)
    present = np.frombuffer(cols["present"], dtype=np.uint32)
    bit = {"correlation": 3, "device": 6}  # tables._PRESENT_BIT
    assert corr[0] == -(1 << 63) and present[0] >> bit["correlation"] & 1
    assert not present[0] >> bit["device"] & 1  # the later null wins
    assert not present[1] >> bit["correlation"] & 1  # absent


def test_scanner_repeated_slow_number_keeps_the_last_value():
    n, _, cols, _, _, deferred = stream._scan.scan(b'[{"dur": 1.00000000000000000000001, "dur": 5000}]')
    assert not deferred and np.frombuffer(cols["dur"], dtype=np.float64)[0] == 5000.0
    # an out-of-range earlier occurrence still makes the event invalid, as in msgspec: the Python path decides
    assert stream._scan.scan(b'[{"dur": 1e400, "dur": 5000}]') is None


def test_scanner_long_fraction_is_deferred_not_overflowed():
    """The UBSan finding: billions of fraction digits overflowed an int exponent. The exponent is bounded
    now (at 100,000 digits), and such a number is left to the Python path; 200,000 zeros show it."""
    n, _, _, _, _, deferred = stream._scan.scan(b'[{"ts": 0.' + b"0" * 200_000 + b'1, "ph": "X"}]')
    assert n == 1 and [r for r, _ in deferred] == [0]
