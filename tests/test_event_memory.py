"""Memory per event (issue 28): what the tables' columns cost per event, and that strings and shape
bytes repeated across events are held once. The whole-process bound (at most 128 bytes per event
beyond the fixed cost, native reader) is measured by bench/memory.py, not here: peak RSS is not a
unit-test quantity."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from builders import TraceBuilder
from traceinspect.trace import stream as S
from traceinspect.trace.model import load_trace

READERS = ["python"] + (["native"] if S._scan is not None else [])
OPS = 300  # ops per trace, each launching one kernel: 3 events per op (op, runtime call, kernel)


def _trace(tmp_path):
    t = TraceBuilder()
    with t.step():
        for _ in range(OPS):
            t.op(
                "aten::add",
                kernels=[("vectorized_elementwise_kernel", 5)],
                input_dims=[[64, 128], [64, 128], []],
                input_type=["float", "float", "Scalar"],
            )
    return t.write(tmp_path / "ops.pt.trace.json")


def _load(path, reader, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_NATIVE", "1" if reader == "native" else "0")
    return load_trace(path, jobs=1)


@pytest.mark.parametrize("reader", READERS)
def test_repeated_shapes_are_one_object(tmp_path, monkeypatch, reader):
    """300 ops with the same Input Dims and Input type hold one bytes object for each, whichever
    reader decoded them (on the previous main the Python reader made one per op)."""
    tr = _load(_trace(tmp_path), reader, monkeypatch)
    ops = tr.cpu_ops[tr.cpu_ops["name"] == "aten::add"]
    assert len(ops) == OPS
    for col in ("input_dims_raw", "input_type_raw"):
        vals = ops[col].tolist()
        assert vals[0] is not None
        assert len({id(v) for v in vals}) == 1, col


@pytest.mark.parametrize("reader", READERS)
def test_names_are_categorical(tmp_path, monkeypatch, reader):
    """Every name column is dictionary-encoded: one table of strings and small integer codes."""
    tr = _load(_trace(tmp_path), reader, monkeypatch)
    for f in dataclasses.fields(tr.tables):
        df = getattr(tr.tables, f.name)
        if isinstance(df, pd.DataFrame) and "name" in df:
            assert isinstance(df["name"].dtype, pd.CategoricalDtype), f.name
            assert df["name"].cat.codes.dtype.itemsize <= 2, f.name  # a few distinct names


@pytest.mark.parametrize("reader", READERS)
def test_column_bytes_per_event(tmp_path, monkeypatch, reader):
    """The tables' columns, counted without the strings and shape bytes they share (deep=False: an
    object column is its pointers), cost what their dtypes cost per row. Per op (an op row, a runtime
    row, a kernel row) the three rows must stay within 3 x 128 bytes. Today: kernel 18 x 8 + 2 x 1 (name and op_name
    codes) = 146, runtime 7 x 8 + 1 = 57, cpu op 8 x 8 + 1 (name code) + 1 (is_annotation) = 66, so
    269 / 3 = about 90 bytes per event."""
    tr = _load(_trace(tmp_path), reader, monkeypatch)
    total = 0
    for f in dataclasses.fields(tr.tables):
        df = getattr(tr.tables, f.name)
        if isinstance(df, pd.DataFrame):
            total += int(df.memory_usage(index=False, deep=False).sum())
    assert tr.tables.n_events >= 3 * OPS
    assert total / (3 * OPS) <= 128
