"""Bad-input corpus for the CLI's error contract (issue 11, classes 2 and 5): crafted steps and device
ids, bad flag values, broken rank directories, malformed saved reports, ambiguous paths.

Each case is a generator: make(tmp) writes its small input files under tmp (derived from the builders,
so nothing is read off a real trace) and returns a Case: the CLI arguments, the exit code the contract
promises, and the words the message (stderr for an error, the report for a warning) must contain: the
file's name and the problem. tests/test_contract_cli.py runs each one in a fresh
`python -m traceinspect` process.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from builders import build_dataloader_stall


@dataclass
class Case:
    argv: list[str]
    exit: int
    says: list[str] = field(default_factory=list)  # in stderr (exit != 0) or in the JSON report (exit 0)
    report: bool = False  # exit 0: `says` is checked in the report's warnings


CASES: dict[str, Callable[[Path], Case]] = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _doc(steps: int = 3, rank: int | None = None, world: int | None = None) -> dict:
    b = build_dataloader_stall(steps=steps, load_us=5_000)
    b.rank, b.world_size = rank, world
    return b.build()


def _write(path: Path, doc, gz: bool = False) -> Path:
    data = json.dumps(doc).encode() if not isinstance(doc, bytes) else doc
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _rename_first_step(doc: dict, name: str) -> dict:
    doc = copy.deepcopy(doc)
    next(e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))["name"] = name
    return doc


# --- class 2: exit 5 on crafted but plausible input ------------------------------------------------


@case
def step_suffix_not_a_number(tmp):
    p = _write(tmp / "step_x.pt.trace.json", _rename_first_step(_doc(), "ProfilerStep#x"))
    return Case(["analyze", str(p), "-f", "json"], 0, ["ProfilerStep", "not taken as steps"], report=True)


@case
def step_suffix_with_markup(tmp):
    p = _write(
        tmp / "step_img.pt.trace.json", _rename_first_step(_doc(), "ProfilerStep#1<img src=https://x.invalid/a.png>")
    )
    return Case(["analyze", str(p), "-f", "json"], 0, ["ProfilerStep", "not taken as steps"], report=True)


@case
def step_suffix_beyond_int64(tmp):
    p = _write(tmp / "step_big.pt.trace.json", _rename_first_step(_doc(), "ProfilerStep#" + "9" * 30))
    return Case(["analyze", str(p), "-f", "json"], 0, ["ProfilerStep", "not taken as steps"], report=True)


@case
def steps_without_length(tmp):
    doc = _doc()
    for e in doc["traceEvents"]:
        if e["name"].startswith("ProfilerStep#"):
            e["dur"] = 0
    p = _write(tmp / "flat_steps.pt.trace.json", doc)
    return Case(["analyze", str(p), "-f", "json"], 0, ["no ProfilerStep# span has a positive duration"], report=True)


@case
def device_id_as_string(tmp):
    doc = _doc()
    doc["deviceProperties"][0]["id"] = "GPU-0<script>"
    for key, value in (("numSms", "132"), ("computeMinor", True), ("totalGlobalMem", 10**30)):
        doc["deviceProperties"][0][key] = value
    p = _write(tmp / "devid.pt.trace.json", doc)
    return Case(["analyze", str(p), "-f", "json"], 0, [], report=True)


@case
def kernel_device_as_string(tmp):
    doc = _doc()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"]["device"] = "cuda:0"
    p = _write(tmp / "kdev.pt.trace.json", doc)
    return Case(["analyze", str(p), "-f", "json"], 0, [], report=True)


@case
def rank_not_an_integer(tmp):
    doc = _doc()
    doc["distributedInfo"] = {"rank": True, "world_size": "8<img>"}
    p = _write(tmp / "rank_bool.pt.trace.json", doc)
    return Case(["analyze", str(p), "-f", "json"], 0, [], report=True)


@case
def steps_slice_with_zero_step(tmp):
    p = _write(tmp / "t.pt.trace.json", _doc())
    return Case(["analyze", str(p), "--steps", "1:2:0"], 2, ["--steps", "1:2:0"])


@case
def steps_slice_with_four_parts(tmp):
    p = _write(tmp / "t.pt.trace.json", _doc())
    return Case(["analyze", str(p), "--steps", "1:2:3:4"], 2, ["--steps", "1:2:3:4"])


@case
def steps_slice_blank(tmp):
    p = _write(tmp / "t.pt.trace.json", _doc())
    return Case(["analyze", str(p), "--steps", " "], 2, ["--steps"])


@case
def one_unreadable_rank_is_skipped(tmp):
    d = tmp / "run"
    d.mkdir()
    for r in range(2):
        _write(d / f"rank{r}.pt.trace.json", _doc(rank=r, world=3))
    (d / "rank2.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": "X", "name": ')  # cut after 36 bytes
    return Case(["analyze", str(d), "-f", "json", "-j", "1"], 0, ["rank2.pt.trace.json", "skipped"], report=True)


@case
def no_readable_rank_is_exit_3(tmp):
    d = tmp / "run"
    d.mkdir()
    for r in range(2):
        (d / f"rank{r}.pt.trace.json").write_bytes(b"<html>a proxy's error page</html>")
    return Case(["analyze", str(d), "-j", "1"], 3, ["rank0.pt.trace.json", "not JSON"])


def _saved(tmp: Path, name: str, mutate) -> Path:
    from traceinspect.analyze import analyze
    from traceinspect.trace.model import load_trace

    rep = analyze(load_trace(_write(tmp / f"{name}.src.pt.trace.json", _doc()))).to_dict()
    mutate(rep)
    return _write(tmp / f"{name}.json", rep)


def _diff_case(name, mutate, where):
    def make(tmp):
        p = _saved(tmp, name, mutate)
        other = _write(tmp / "other.pt.trace.json", _doc())
        return Case(["diff", str(p), str(other)], 3, [f"{name}.json", "wrong shape", where])

    make.__name__ = f"diff_saved_report_{name}"
    return case(make)


_diff_case("findings_not_a_list", lambda r: r.update(findings={"a": 1}), "$.findings")
_diff_case("rank_as_string", lambda r: r["trace"].update(rank="<img src=x>"), "$.trace.rank")
_diff_case(
    "step_duration_as_string", lambda r: r["steps"]["per_step"][0].update(dur_us="fast"), "$.steps.per_step[0].dur_us"
)
_diff_case("breakdown_missing", lambda r: r.pop("breakdown"), "breakdown")
_diff_case("finding_without_title", lambda r: r["findings"][0].pop("title"), "$.findings[0]")
_diff_case("verdict_without_title", lambda r: r["verdict"].pop("top_title"), "$.verdict")
_diff_case("top_kernel_as_number", lambda r: r.update(top_kernels=[7]), "$.top_kernels[0]")
_diff_case("schema_from_the_future", lambda r: r.update(schema_version=99), "schema_version")


# --- class 5: directories, empty path, output names -----------------------------------------------


@case
def mixed_runs_in_one_folder(tmp):
    d = tmp / "logdir"
    d.mkdir()
    for r in range(2):
        _write(d / f"a_rank{r}.pt.trace.json", _doc(rank=r, world=2))
    for r in range(4):
        _write(d / f"b_rank{r}.pt.trace.json", _doc(rank=r, world=4))
    return Case(
        ["analyze", str(d)], 2, ["different runs", "a_rank0.pt.trace.json", "b_rank3.pt.trace.json", "one run's folder"]
    )


@case
def duplicate_ranks(tmp):
    d = tmp / "run"
    d.mkdir()
    _write(d / "host1_11.pt.trace.json", _doc(rank=0, world=2))
    _write(d / "host2_22.pt.trace.json", _doc(rank=0, world=2))
    return Case(["analyze", str(d)], 2, ["rank 0", "host1_11.pt.trace.json", "host2_22.pt.trace.json"])


@case
def unrelated_single_process_runs(tmp):
    # what a folder of separate single-GPU runs looks like: no distributedInfo, no rank in the names
    d = tmp / "runs"
    d.mkdir()
    for name in ("bert", "gpt2", "resnet"):
        _write(d / f"{name}.json.gz", _doc(), gz=True)
    return Case(["analyze", str(d)], 2, ["rank 0", "bert.json.gz", "resnet.json.gz", "assumed"])


@case
def one_handler_worker_with_two_cycles(tmp):
    # tensorboard_trace_handler writes <worker>.<ms>.pt.trace.json once per profiling cycle
    d = tmp / "tb"
    d.mkdir()
    _write(d / "node1_4242.1700000000001.pt.trace.json.gz", _doc(), gz=True)
    _write(d / "node1_4242.1700000005002.pt.trace.json.gz", _doc(), gz=True)
    return Case(
        ["analyze", str(d)], 2, ["one process", "node1_4242", "profiling cycle", "1700000000001", "1700000005002"]
    )


@case
def one_worker_name_on_every_rank_is_fine(tmp):
    # tensorboard_trace_handler(dir, worker_name="train") on every rank: distributedInfo tells them apart
    d = tmp / "tb"
    d.mkdir()
    for r, ms in ((0, 1700000000001), (1, 1700000000007)):
        _write(d / f"train.{ms}.pt.trace.json", _doc(rank=r, world=2))
    return Case(["analyze", str(d), "-f", "json", "-j", "1"], 0, ["2 ranks analysed"], report=True)


@case
def logdir_of_several_runs(tmp):
    d = tmp / "logdir"
    for run in ("run_a", "run_b"):
        (d / run).mkdir(parents=True)
        _write(d / run / "w.1700000000000.pt.trace.json", _doc())
    return Case(["analyze", str(d)], 2, ["run_a", "run_b", "one run's folder"])


@case
def empty_path(tmp):
    return Case(["analyze", ""], 2, ["PATH is empty"])


@case
def output_extension_names_no_format(tmp):
    p = _write(tmp / "t.pt.trace.json", _doc())
    return Case(["analyze", str(p), "-o", str(tmp / "report.htm")], 2, ["report.htm", ".html", ".md", "--format"])


@case
def diff_output_extension_names_no_format(tmp):
    p = _write(tmp / "t.pt.trace.json", _doc())
    return Case(["diff", str(p), str(p), "-o", str(tmp / "d.markdown")], 2, ["d.markdown", ".md"])


@case
def fifo_as_the_trace(tmp):
    p = tmp / "pipe.pt.trace.json"
    os.mkfifo(p)
    return Case(["analyze", str(p)], 3, ["pipe.pt.trace.json", "not a regular file"])
