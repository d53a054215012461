"""CLI exit codes and one-line errors (no traceback reaches the user)."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall, build_healthy
from traceinspect.cli import cli


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    return r.exit_code, r.output + (r.stderr if hasattr(r, "stderr") and r.stderr_bytes is not None else "")


@pytest.fixture
def stall(tmp_path):
    return build_dataloader_stall().write(tmp_path / "stall.pt.trace.json.gz")


def test_text_report_ok(stall):
    code, out = run("analyze", stall)
    assert code == 0
    assert "VERDICT" in out and "dataloader-stall" in out


def test_json_report_has_the_documented_keys(stall, tmp_path):
    out = tmp_path / "r.json"
    code, _ = run("analyze", stall, "-o", out)  # format guessed from the extension
    assert code == 0
    d = json.loads(out.read_text())
    for k in ("schema_version", "trace", "steps", "breakdown", "findings", "warnings"):
        assert k in d
    f = d["findings"][0]
    for k in ("code", "name", "title", "time_lost_us", "time_lost_frac", "confidence", "evidence", "fix"):
        assert k in f


def test_markdown_report(stall):
    code, out = run("analyze", stall, "--format", "md")
    assert code == 0 and out.startswith("## traceinspect")


def test_fail_on_exits_1_only_above_threshold(stall):
    assert run("analyze", stall, "--fail-on", "0.1")[0] == 1
    assert run("analyze", stall, "--fail-on", "0.99")[0] == 0


def test_usage_errors_exit_2(stall):
    assert run("analyze", stall, "--steps", "x:y")[0] == 2
    assert run("analyze", stall, "--steps", "50:60")[0] == 2
    assert run("analyze", stall, "--fail-on", "7")[0] == 2
    assert run("analyze", stall, "--format", "pdf")[0] == 2
    assert run("explain", "no-such-detector")[0] == 2


def test_unreadable_trace_exits_3_with_one_line(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{nope")
    proc = subprocess.run([sys.executable, "-m", "traceinspect", "analyze", str(p)], capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and str(p) in lines[0]
    assert lines[1].startswith("hint: ")


def test_strict_turns_a_detector_failure_into_exit_4(stall, monkeypatch):
    from traceinspect import detectors as registry
    from traceinspect.detectors.base import Detector

    class Broken(Detector):
        code, name, summary = "TI999", "broken", "always fails"

        def detect(self, trace, ctx):
            raise RuntimeError("boom")

    monkeypatch.setattr(registry, "ALL", (Broken,))
    assert run("analyze", stall, "--strict")[0] == 4
    code, out = run("analyze", stall)
    assert code == 0 and "broken" in out and "boom" in out


def test_directory_of_ranks(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for r in range(2):
        b = build_dataloader_stall(load_us=10_000 * (r + 1))
        b.rank, b.world_size = r, 2
        b.write(d / f"host_{r}.pt.trace.json")
    code, out = run("analyze", d, "--format", "json", "-j", "1")
    assert code == 0
    rep = json.loads(out)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert rep["ranks"][1]["slowest"] and rep["trace"]["rank"] == 1
    code, out = run("analyze", d, "--rank", "0", "--format", "json")
    assert code == 0 and json.loads(out)["trace"]["rank"] == 0
    assert run("analyze", d, "--rank", "7")[0] == 2


def test_detectors_and_explain():
    code, out = run("detectors")
    assert code == 0 and "dataloader-stall" in out
    code, out = run("explain", "dataloader-stall")
    assert code == 0 and "## How to fix" in out


def test_healthy_trace_has_no_findings(tmp_path):
    p = build_healthy().write(tmp_path / "h.json")
    code, out = run("analyze", p, "--format", "json")
    assert code == 0
    assert json.loads(out)["findings"] == []


def test_a_window_under_a_millisecond_is_not_judged(tmp_path):
    from builders import TraceBuilder

    t = TraceBuilder()
    with t.step():  # a step of about 5 us (one op, one launch): a unit-test trace, not a training step
        t.op("aten::add", kernels=[("k", 0.3)], cpu_us=0.1)
    code, out = run("analyze", t.write(tmp_path / "tiny.json"), "--format", "json")
    rep = json.loads(out)
    assert code == 0 and rep["findings"] == []
    assert any("too short" in s["reason"] for s in rep["skipped"])
    assert any("under 1 ms" in w for w in rep["warnings"])


def test_output_names_and_formats(stall, tmp_path):
    code, out = run("analyze", stall, "-o", tmp_path / "report.htm")
    assert code == 2 and "report.htm" in out and ".html" in out and not (tmp_path / "report.htm").exists()
    assert run("analyze", stall, "-o", tmp_path / "report.htm", "--format", "md")[0] == 0
    assert (tmp_path / "report.htm").read_text().startswith("## traceinspect")
    assert run("analyze", stall, "-o", os.devnull)[0] == 0  # no extension: text, as without -o
    assert run("analyze", stall, "--steps", "0:3:0")[0] == 2


def test_a_closed_stdout_stops_quietly_not_as_an_unreadable_trace(stall):
    # `traceinspect analyze t.json | head`: the reader going away is no error of the trace; it used to
    # exit 3 with "cannot read (Broken pipe) / check the path and its permissions"
    p = subprocess.Popen(
        [sys.executable, "-m", "traceinspect", "analyze", str(stall), "-f", "json", "--no-cache"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # before the report is written: its write meets EPIPE
    err = p.stderr.read()
    assert p.wait() == 141 and err == b"", err
