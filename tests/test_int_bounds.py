"""Integers out of range in a trace are absent, never a crash or a wrap, and both readers agree (issue 28)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from builders import build_healthy
from traceinspect.cli import cli


def _both_readers(p):
    """Exit codes of `analyze -f json` with the native and the Python reader, which must agree exactly."""
    runs = [
        CliRunner().invoke(cli, ["analyze", str(p), "-f", "json", "--no-cache"], env={"TRACEINSPECT_NATIVE": n})
        for n in ("1", "0")
    ]
    assert runs[0].exit_code == runs[1].exit_code and runs[0].output == runs[1].output
    return [r.exit_code for r in runs], runs[0].output


@pytest.mark.parametrize("value", [2**63, 1e300, -(2**63) - 1, 2**200])
def test_a_grid_or_block_component_outside_int64_is_read_as_absent_by_both_readers(tmp_path, value):
    doc = json.loads(build_healthy().write(tmp_path / "ok.json").read_text())
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["grid"] = [value, 1, 1]
    kernel["args"]["block"] = [1, value, 1]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    codes, out = _both_readers(p)
    assert codes[0] == 0, out


@pytest.mark.parametrize("field", ["tid", "pid"])
@pytest.mark.parametrize("value", ["123456789012345678901234567890", 123456789012345678901234567890])
def test_a_thread_or_process_id_of_30_digits_is_absent_not_a_crash_in_both_readers(tmp_path, field, value):
    doc = json.loads(build_healthy().write(tmp_path / "ok.json").read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e[field] = value
            break
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    codes, out = _both_readers(p)
    assert codes[0] in (0, 3), out  # read (the id absent) or refused with one line; never exit 5


def test_a_timestamp_of_integer_minus_zero_reads_the_same_in_both_readers(tmp_path):
    """JSON `-0` is -0.0 to the native reader's strtod and the int 0 to Python: the earliest event at
    `"ts": -0` once gave origin_us -0.0 natively and 0.0 in Python."""
    doc = json.loads(build_healthy().write(tmp_path / "ok.json").read_text())
    timed = [e for e in doc["traceEvents"] if "ts" in e and e.get("ph") != "M"]
    first = min(e["ts"] for e in timed)
    for e in timed:
        e["ts"] -= first  # the earliest timed event at 0, written below as -0
    text = json.dumps(doc).replace('"ts": 0,', '"ts": -0,').replace('"ts": 0.0,', '"ts": -0,')
    assert '"ts": -0,' in text
    p = tmp_path / "t.json"
    p.write_text(text)
    codes, out = _both_readers(p)  # byte-identical reports from both readers
    assert codes == [0, 0] and json.loads(out)["trace"]["origin_us"] == 0.0
    assert '"origin_us": -0.0' not in out


def test_flow_ids_of_30_digits_or_beyond_int64_do_not_crash_either_reader(tmp_path):
    doc = json.loads(build_healthy().write(tmp_path / "ok.json").read_text())
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for fid in ("123456789012345678901234567890", 2**70, -(2**70)):
        doc["traceEvents"] += [
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 1, "tid": 1, "ts": k["ts"] - 5},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": k["pid"], "tid": k["tid"], "ts": k["ts"]},
        ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    codes, out = _both_readers(p)
    assert codes == [0, 0], out
    assert "integers beyond int64" in out  # the numeric ones are counted, not silently wrapped


def test_ids_beyond_int64_given_as_strings_are_counted_in_one_warning_by_both_readers(tmp_path):
    doc = json.loads(build_healthy().write(tmp_path / "ok.json").read_text())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"][:3]
    assert len(ops) == 3
    for e in ops:
        e["tid"] = "123456789012345678901234567890"  # 30 digits: beyond int64
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    flow = {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": "9" * 40, "pid": 1, "tid": 1, "ts": k["ts"] - 5}
    doc["traceEvents"].append(flow)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    codes, out = _both_readers(p)
    assert codes == [0, 0], out
    # 3 cpu_op tids + 1 flow id, each read as absent and counted once
    assert [w for w in json.loads(out)["warnings"] if "beyond int64" in w][0].startswith("4 pid/tid/stream/flow id")


def test_grid_products_that_leave_int64_are_absent_not_wrapped():
    """A grid of in-range components whose product leaves int64 is 0 (absent), as _prod says, in the
    vectorised path too: numpy's int64 product wrapped it to a negative count of blocks."""
    from traceinspect.trace.tables import _grid_product, _prod

    grids = [[3037000500, 3037000500, 2], [2**31 - 1, 65535, 65535], [128, 1, 1], None]
    assert _grid_product(grids).tolist() == [_prod(g) for g in grids] == [0, (2**31 - 1) * 65535 * 65535, 128, 0]
