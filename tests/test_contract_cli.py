"""The error contract, end to end: every case of the bad-input corpus (tests/corpus/contract_cases.py)
in a fresh `python -m traceinspect` process (in-process in the fast run: tests/clirun.py). An error is one line naming the file and the problem, a
hint line, and exit 2 (usage) or 3 (input); never a traceback, never exit 5, never a hang."""

import json
import os
import pytest

import clirun
from corpus.contract_cases import CASES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(argv, tmp_path, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO, TRACEINSPECT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TRACEINSPECT_DEBUG", None)
    return clirun.run(argv, env=env, timeout=timeout, cwd=tmp_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_case(name, tmp_path):
    case = CASES[name](tmp_path)
    proc = cli(case.argv, tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == case.exit, proc.stderr
    if case.exit == 0:
        report = json.loads(proc.stdout)
        warnings = " ".join(report["warnings"])
        for word in case.says:
            assert word in warnings, (word, report["warnings"])
        return
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), proc.stderr
    for word in case.says:
        assert word in proc.stderr, (word, proc.stderr)


def test_a_crafted_step_name_leaves_the_other_steps_whole(tmp_path):
    """ProfilerStep#x is dropped; the three builder steps were #10..#12, so #11 and #12 remain."""
    proc = cli(CASES["step_suffix_not_a_number"](tmp_path).argv, tmp_path)
    rep = json.loads(proc.stdout)
    assert [r["step"] for r in rep["steps"]["per_step"]] == [11, 12]


def test_a_string_device_id_keeps_the_gpu(tmp_path):
    """deviceProperties[0].id "GPU-0<script>" is not a number: the entry's position (0) is its id,
    so the kernels on device 0 still find their H100; numSms "132" is not an int: unknown."""
    rep = json.loads(cli(CASES["device_id_as_string"](tmp_path).argv, tmp_path).stdout)
    assert rep["trace"]["gpu"]["name"].startswith("NVIDIA H100") and rep["trace"]["gpu"]["id"] == 0
    assert rep["trace"]["gpu"]["num_sms"] is None and rep["trace"]["gpu"]["memory_bytes"] is None


def test_an_explicit_format_takes_any_output_name(tmp_path):
    case = CASES["output_extension_names_no_format"](tmp_path)
    proc = cli(case.argv + ["--format", "html"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.htm").read_text().startswith("<!DOCTYPE html>")


def test_a_rank_that_is_not_an_integer_is_no_rank(tmp_path):
    """distributedInfo.rank true (a bool, an int to Python) and world_size "8<img>": neither is used."""
    rep = json.loads(cli(CASES["rank_not_an_integer"](tmp_path).argv, tmp_path).stdout)
    assert (rep["trace"]["rank"], rep["trace"]["rank_source"], rep["trace"]["world_size"]) == (0, "default", None)


@pytest.mark.parametrize("argv", [["--help"], ["detectors"], ["analyze", "--help"]])
def test_help_and_the_detector_list_stay_off_pandas(argv):
    """The fixed cost users feel first (issue 29 item 4): `--help` and `detectors` never import pandas,
    numpy or a detector module; a fresh interpreter's import log says what was imported."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "traceinspect", *argv], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-500:]
    mods = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "traceinspect.cli" in mods  # the log is read right
    heavy = {m for m in mods if m.split(".")[0] in ("pandas", "numpy") or m.startswith("traceinspect.detectors")}
    assert not heavy, sorted(heavy)[:5]
