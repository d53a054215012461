"""The streaming, chunked loader must give exactly what the whole-buffer path gives."""

import gzip
import json

import numpy as np
import pytest

from builders import build_dataloader_stall, build_healthy
from traceinspect.trace import load as L
from traceinspect.trace import stream
from traceinspect.trace.model import from_loaded


@pytest.fixture
def tiny_chunks(monkeypatch):
    # a few KB per chunk, so that a small builder trace is cut into many chunks
    monkeypatch.setattr(stream.L, "BLOCK_BYTES", 3000)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 5000)


def _tables(loaded):
    return from_loaded(loaded).tables


def _same(a, b):
    for name in ("kernels", "memcpy", "runtime", "cpu_ops", "python"):
        da, db = getattr(a, name), getattr(b, name)
        assert len(da) == len(db), name
        for col in ("ts_us", "dur_us"):
            assert np.allclose(da[col].to_numpy(), db[col].to_numpy()), (name, col)
        assert da["name"].astype(str).tolist() == db["name"].astype(str).tolist()
    assert a.kernels["op_name"].astype(str).tolist() == b.kernels["op_name"].astype(str).tolist()


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("native", ["1", "0"])  # jobs=2: scanner threads, or decoder processes
def test_chunked_equals_whole_buffer(tmp_path, tiny_chunks, gz, jobs, native, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
    b = build_healthy(steps=6)
    b.rank, b.world_size = 3, 8
    p = b.write(tmp_path / ("t.json.gz" if gz else "t.json"))
    streamed = stream.load_streaming(p, jobs=jobs)
    assert streamed.partials is not None and len(streamed.partials) > 3  # really chunked
    whole = L.load_file(p)
    _same(_tables(streamed), _tables(whole))
    assert streamed.doc.distributedInfo["rank"] == 3  # trailing key kept
    assert streamed.doc.deviceProperties[0]["numSms"] == 132  # leading key kept


def test_bare_array_chunked(tmp_path, tiny_chunks):
    doc = build_dataloader_stall().build()
    p = tmp_path / "arr.json"
    p.write_text(json.dumps(doc["traceEvents"], indent=1))
    _same(_tables(stream.load_streaming(p)), _tables(L.load_file(p)))


def test_truncated_chunked_keeps_every_complete_event(tmp_path, tiny_chunks):
    doc = build_healthy(steps=6).build()
    full = json.dumps(doc, indent=1).encode()
    cut = full[: int(len(full) * 0.7)]
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(full)[: int(len(gzip.compress(full)) * 0.7)])
    t = from_loaded(stream.load_streaming(p, jobs=2))
    assert any("truncated" in w for w in t.warnings)
    p2 = tmp_path / "cut.json"
    p2.write_bytes(cut)
    t2 = from_loaded(stream.load_streaming(p2))
    # the kept events are exactly the complete ones: compare with a parse of the same prefix
    whole = from_loaded(L.load_file(p2))
    assert t2.meta.n_events == whole.meta.n_events > 0


def test_false_boundary_inside_args_falls_back(tmp_path, tiny_chunks):
    """A list of objects inside args has `}, {"` too; the result must still be right."""
    b = build_healthy(steps=4)
    for e in b.events:
        if e.get("cat") == "cpu_op":
            e["args"]["nested"] = [{"a": 1}, {"b": 2}] * 50
    p = b.write(tmp_path / "n.json")
    _same(_tables(stream.load_streaming(p, jobs=1)), _tables(L.load_file(p)))


def test_event_larger_than_a_chunk(tmp_path, tiny_chunks):
    """A chunk with no event boundary in it (one huge event) makes the reader read on, not spin."""
    b = build_healthy(steps=2)
    b.events[3]["args"]["Call stack"] = "x" * 50_000  # 10 chunks' worth, no boundary inside
    p = b.write(tmp_path / "big.json")
    _same(_tables(stream.load_streaming(p)), _tables(L.load_file(p)))


def test_header_with_odd_types_and_a_nested_trace_events_key(tmp_path, tiny_chunks):
    """Metadata before traceEvents with a value of an unexpected type, and a `"traceEvents"` key nested
    inside it: the streaming reader finds the real array and keeps what the whole-buffer path keeps."""
    doc = build_healthy(steps=3).build()
    events = doc.pop("traceEvents")
    doc = {
        "schemaVersion": "1",
        "distributedInfo": {"traceEvents": [{"a": 1}], "rank": 2, "world_size": 4},
        **doc,
        "traceEvents": events,
    }
    p = tmp_path / "odd_header.json"
    p.write_text(json.dumps(doc))
    streamed = stream.load_streaming(p)
    assert streamed.partials is not None and len(streamed.partials) > 1  # really streamed
    assert streamed.doc.distributedInfo["rank"] == 2
    _same(_tables(streamed), _tables(L.load_file(p)))


def test_leading_whitespace_is_not_accumulated(tmp_path, tiny_chunks):
    """Whitespace before the document is dropped block by block: the result is the plain file's."""
    b = build_healthy(steps=2)
    p = b.write(tmp_path / "t.json")
    q = tmp_path / "padded.json"
    q.write_bytes(b" \n\t" * 20_000 + p.read_bytes())
    streamed = stream.load_streaming(q)
    assert streamed.json_bytes == q.stat().st_size
    _same(_tables(streamed), _tables(stream.load_streaming(p)))
