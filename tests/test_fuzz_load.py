"""Broken files never produce anything but a result or the documented TraceError (no traceback):
the file cut at many points, and single bytes flipped, in plain and gzip form."""

import gzip
import json
import random
import threading
import time

import pytest

from builders import build_healthy
from traceinspect.analyze import analyze
from traceinspect.errors import TraceError
from traceinspect.trace import stream
from traceinspect.trace.model import load_trace


@pytest.fixture(scope="module")
def doc_bytes():
    return json.dumps(build_healthy(steps=3).build(), indent=1).encode()


def _check(path):
    try:
        tr = load_trace(path)
    except TraceError as e:
        assert str(path) in str(e) and e.hint
        return
    analyze(tr, strict=True)  # detectors must cope with whatever was recovered


@pytest.mark.parametrize("gz", [False, True])
def test_cut_anywhere(tmp_path, doc_bytes, gz, monkeypatch):
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8192)
    data = gzip.compress(doc_bytes) if gz else doc_bytes
    rng = random.Random(7)
    for i, cut in enumerate(sorted(rng.sample(range(1, len(data)), 25))):
        p = tmp_path / f"cut{i}.json{'.gz' if gz else ''}"
        p.write_bytes(data[:cut])
        _check(p)


@pytest.mark.parametrize("gz", [False, True])
def test_flipped_bytes(tmp_path, doc_bytes, monkeypatch, gz):
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8192)
    rng = random.Random(11)
    for i in range(60):
        b = bytearray(gzip.compress(doc_bytes) if gz else doc_bytes)
        for _ in range(3):
            b[rng.randrange(2 if gz else 0, len(b))] = rng.choice(b'{}[],:"0x\\ \n')
        p = tmp_path / f"flip{i}.json{'.gz' if gz else ''}"
        p.write_bytes(bytes(b))
        _check(p)


def test_no_reader_thread_left_behind_after_an_early_exit(tmp_path, monkeypatch):
    """If parsing fails mid-file, the gunzip reader thread (blocked on its full queue) is stopped."""
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8192)

    def boom(_):
        raise RuntimeError("parser failed")

    monkeypatch.setattr(stream, "_parse_chunk", boom)
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(json.dumps(build_healthy(steps=12).build(), indent=1).encode()))
    before = threading.active_count()
    with pytest.raises(RuntimeError):
        stream.load_streaming(p)
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


@pytest.mark.parametrize("native", ["0", "1"])
@pytest.mark.parametrize("case", ["open_brackets", "deep_args_gz", "big_ints"])
def test_class2_inputs_exit_3_or_load_never_5(tmp_path, monkeypatch, native, case):
    """Issue 11, class 2: deep nesting (RecursionError) and integers beyond int64 ended in exit 5.
    Deep nesting is now a one-line exit-3 error naming the file and the byte; integers beyond int64
    are read like values of the wrong type (documented in docs/tables.md), in both readers."""
    from click.testing import CliRunner

    from traceinspect.cli import cli

    monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
    doc = build_healthy(steps=2).build()
    if case == "open_brackets":
        p = tmp_path / "brackets.json"
        p.write_bytes(b"[" * (4 << 20))
    elif case == "deep_args_gz":
        ev = doc["traceEvents"]
        ev[len(ev) // 2].setdefault("args", {})["deep"] = "X"
        raw = json.dumps(doc).encode().replace(b'"deep": "X"', b'"deep": ' + b"[" * 5000 + b"]" * 5000, 1)
        p = tmp_path / "deep.json.gz"
        p.write_bytes(gzip.compress(raw))
    else:
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                e["args"]["correlation"] = 2**64 + 5
            if e.get("cat") == "cpu_op":
                e["tid"] = -(2**70)
        p = tmp_path / "bigints.json"
        p.write_text(json.dumps(doc))
    r = CliRunner().invoke(cli, ["analyze", str(p)])
    if case == "big_ints":
        assert r.exit_code == 0, r.output
        # each value that does not fit is ignored on its own; the events (and their other fields) stay
        assert "events had fields of unexpected types (or integers beyond int64) that were ignored" in r.output
        assert "were dropped" not in r.output
        return
    assert r.exit_code == 3, r.output
    err = r.output.strip().splitlines()
    assert f"{p}: is nested deeper than 128 levels at byte " in err[0] and "Traceback" not in r.output


def test_deep_nesting_fails_before_the_file_is_read(tmp_path, monkeypatch):
    """Megabytes of '[' have no event boundary to cut at: the streaming reader measures the depth of
    the unfinished event once it is a chunk long and stops there, instead of buffering the file."""
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 16 << 10)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 64 << 10)
    read = []
    real = stream.L.read_blocks

    def counting(*a, **k):
        for b in real(*a, **k):
            read.append(len(b))
            yield b

    monkeypatch.setattr(stream.L, "read_blocks", counting)
    p = tmp_path / "brackets.json"
    p.write_bytes(b"[" * (8 << 20))
    with pytest.raises(TraceError, match=r"is nested deeper than 128 levels at byte 128 of its JSON"):
        stream.load_streaming(p)
    # one chunk, plus the blocks the reader thread had queued (3) and the one it was reading
    assert sum(read) <= (64 << 10) + 5 * (16 << 10) < (8 << 20)
