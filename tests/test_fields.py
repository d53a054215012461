"""The one declaration of the event fields (traceinspect/trace/fields.py) and everything that must
agree with it: the msgspec `Args` struct, the native scanner's column enum, column names, `present`
bits and key table (parsed from _scan.c), both extraction functions, and docs/tables.md. Adding a
field in one place only fails here, naming the place that is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from traceinspect.trace import fields, load, tables
from traceinspect.trace.model import load_trace

ROOT = Path(__file__).resolve().parents[1]
C_SRC = (ROOT / "traceinspect" / "trace" / "_scan.c").read_text()
DOC = (ROOT / "docs" / "tables.md").read_text()


def _c_enum() -> list[str]:
    body = re.search(r"enum \{(.*?)N_COLS", C_SRC, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return [t.strip() for t in body.split(",") if t.strip()]


def _c_col_names() -> list[str]:
    body = re.search(r"COL_NAMES\[N_COLS\] = \{(.*?)\};", C_SRC, re.S).group(1)
    return re.findall(r'"([^"]+)"', body)


def _c_args_keys() -> dict[str, tuple[str, str | None]]:
    """parse_args's key table: JSON key -> (reader function, enum constant it fills or None)."""
    body = re.search(r"static int parse_args\(.*?\n\}\n", C_SRC, re.S).group(0)
    out = {}
    for m in re.finditer(
        r'key_is\(k, kl, "([^"]+)"\)\)\s*\{?\s*(?:if \(is_null\(s\)\)[^;]*;\s*else )?'
        r"rc = (\w+)\(([^;]*)\);",
        body,
    ):
        const = re.search(r"\bC_\w+", m.group(3))
        out[m.group(1)] = (m.group(2), const.group(0) if const else None)
    return out


def test_msgspec_args_struct_is_the_declaration():
    assert load.Args.__struct_fields__ == tuple(f.name for f in fields.ARGS)
    assert load.Args.__struct_encode_fields__ == tuple(f.key for f in fields.ARGS)


def test_python_scan_tables_are_the_declaration():
    assert tables._SCAN_INT_FIELDS == tuple(f.name for f in fields.ARGS if f.kind == "int")
    assert tables._SCAN_FLOAT_FIELDS == tuple(f.name for f in fields.ARGS if f.kind == "float")
    for f in fields.ARGS:
        if f.kind == "float":
            assert tables._scan_dtype(f.name) == np.float64, f.name
        elif f.kind == "int":
            assert tables._scan_dtype(f.name) == np.int64, f.name


def test_c_enum_and_column_names_agree():
    enum, names = _c_enum(), _c_col_names()
    assert len(enum) == len(names), f"_scan.c: {len(enum)} enum constants but {len(names)} COL_NAMES"
    for f in fields.ARGS:
        if f.kind in ("int", "float"):
            assert f.name in names, f"_scan.c has no column {f.name!r} (add it to the enum and COL_NAMES)"
    # the row buffers are sized from the enum ranges
    sizes = {m.group(2): int(m.group(3)) for m in re.finditer(r"(int32_t|int64_t|double) (s|i|f)\[(\d+)\];", C_SRC)}
    assert sizes["s"] == enum.index("C_ANAME") - enum.index("C_CAT") + 1, "_scan.c row.s[] size"
    assert sizes["i"] == enum.index("C_TYPE_LEN") - enum.index("C_PID") + 1, "_scan.c row.i[] size"
    assert sizes["f"] == len(enum) - enum.index("C_TS"), "_scan.c row.f[] size"


def test_c_present_bits_are_the_declaration():
    enum, names = _c_enum(), _c_col_names()
    pid = enum.index("C_PID")
    for name, bit in tables._PRESENT_BIT.items():
        assert name in names, f"_scan.c has no column {name!r}"
        assert names.index(name) - pid == bit, (
            f"present bit of {name!r}: _scan.c gives {names.index(name) - pid}, fields.py {bit} "
            "(keep the C int64 columns in the order of fields.ARGS)"
        )
    assert max(tables._PRESENT_BIT.values()) < 32


def test_c_key_table_is_the_declaration():
    keys, enum, names = _c_args_keys(), _c_enum(), _c_col_names()
    col = dict(zip(enum, names))
    reader = {
        "int": "opt_int",
        "float": "opt_float",
        "str": "opt_string",
        "raw": "raw_span",
        "dims": "parse_dims_product",
    }
    declared = {f.key: f for f in fields.ARGS}
    assert set(keys) == set(declared), (
        f"_scan.c parse_args keys differ from fields.ARGS: only in C {set(keys) - set(declared)}, "
        f"only declared {set(declared) - set(keys)}"
    )
    for key, (fn, const) in keys.items():
        f = declared[key]
        assert fn == reader[f.kind], f"_scan.c reads {key!r} with {fn}, declared {f.kind}"
        if f.kind in ("int", "float"):
            assert col.get(const) == f.name, f"_scan.c puts {key!r} in {col.get(const)}, declared {f.name}"


# one event per declared (field, table column): a distinctive value must reach the column, in both readers
_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "runtime": "cuda_runtime", "cpu_op": "cpu_op", "sync": "cuda_sync"}
_TABLE = {
    "kernel": "kernels",
    "memcpy": "memcpy",
    "runtime": "runtime",
    "cpu_op": "cpu_ops",
    "memory": "memory",
    "sync": "sync_events",
}


def _value(f: fields.Field, k: int):
    return {"int": 1000 + k, "float": 1000.5 + k, "str": f"v{k}", "dims": [2, 3, 100 + k], "raw": [[7, 100 + k]]}[
        f.kind
    ]


def _expected(f: fields.Field, k: int):
    v = _value(f, k)
    return {"dims": 6 * (100 + k), "raw": json.dumps(v).encode()}.get(f.kind, v)


def _cases():
    out = []
    for k, f in enumerate(fields.ARGS):
        for c in f.columns:
            out.append((f, k, *c.split(".")))
    return out


@pytest.mark.parametrize("native", ["0", "1"])
def test_every_declared_field_reaches_its_column(tmp_path, monkeypatch, native):
    from traceinspect.trace import stream

    if native == "1" and stream._scan is None:
        pytest.skip("the native scanner was not built")
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "python"}}]
    for n, (f, k, table, _col) in enumerate(_cases()):
        args = {f.key: _value(f, k)}
        if table == "memory":
            events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 100.0 + n, "s": "t", "args": args})
        else:
            events.append(
                {
                    "ph": "X",
                    "cat": _CAT[table],
                    "name": f"e{n}",
                    "pid": 1,
                    "tid": 1,
                    "ts": 100.0 + n,
                    "dur": 1.0,
                    "args": args,
                }
            )
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
    tr = load_trace(path)
    for f, k, table, col in _cases():
        df = getattr(tr, _TABLE[table])
        assert col in df.columns, f"{table}.{col} (field {f.name}) is not a column"
        values = [bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else v for v in df[col].tolist()]
        assert _expected(f, k) in values, f"{f.key!r} never reached {table}.{col} (reader native={native})"


@pytest.mark.parametrize("native", ["0", "1"])
def test_nan_absent_fields_tell_absent_from_zero(tmp_path, monkeypatch, native):
    """A `nan_absent` float (flops: 0 is a value the profiler can record) is NaN where the key is absent,
    null or the event has no args, and 0.0 where it says 0, in both readers."""
    from traceinspect.trace import stream

    if native == "1" and stream._scan is None:
        pytest.skip("the native scanner was not built")
    cases = [(f, *c.split(".")) for f in fields.ARGS if f.nan_absent for c in f.columns]
    assert cases, "no nan_absent field is declared"
    for f, table, col in cases:
        assert f.kind == "float" and np.isnan(f.default)
        arg_sets = [{f.key: 0}, {f.key: 2.5}, {f.key: None}, {}, None]
        events = [
            {
                "ph": "X",
                "cat": _CAT[table],
                "name": f"e{n}",
                "pid": 1,
                "tid": 1,
                "ts": 100.0 + n,
                "dur": 1.0,
                **({} if a is None else {"args": a}),
            }
            for n, a in enumerate(arg_sets)
        ]
        path = tmp_path / f"{f.name}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        monkeypatch.setenv("TRACEINSPECT_NATIVE", native)
        df = getattr(load_trace(path), _TABLE[table])
        got = dict(zip(df["name"].astype(str), df[col].tolist()))
        assert got["e0"] == 0.0 and got["e1"] == 2.5, (f.name, got)
        assert all(np.isnan(got[f"e{n}"]) for n in (2, 3, 4)), (f.name, got)


def test_docs_list_the_declared_fields():
    body = DOC.split("<!-- fields:begin -->\n", 1)[1].split("<!-- fields:end -->", 1)[0]
    assert body == fields.markdown_table(), (
        "docs/tables.md's field list is stale: regenerate it with "
        "python3 -c 'from traceinspect.trace import fields; print(fields.markdown_table())'"
    )
