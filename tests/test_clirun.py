"""tests/clirun.py runs the CLI in-process in the fast run and in fresh processes in the full one: the two
must tell a test the same thing, and the in-process one must not hide what a process would show."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import clirun
from builders import build_healthy

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path) -> dict:
    env = dict(os.environ, TRACEINSPECT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TRACEINSPECT_DEBUG", None)
    return env


@pytest.mark.parametrize("argv", [["analyze", "{trace}", "-f", "json"], ["analyze", "{missing}"], ["nope"]])
def test_in_process_and_a_process_say_the_same(tmp_path, monkeypatch, argv):
    trace = build_healthy().write(tmp_path / "t.pt.trace.json")
    argv = [a.format(trace=trace, missing=tmp_path / "missing.json") for a in argv]
    runs = []
    for in_process in (True, False):
        monkeypatch.setattr(clirun, "IN_PROCESS", in_process)
        runs.append(clirun.run(argv, env=_env(tmp_path), cwd=tmp_path))
    inproc, proc = runs
    assert (inproc.returncode, inproc.stdout, inproc.stderr) == (proc.returncode, proc.stdout, proc.stderr)


def test_an_exception_that_escapes_the_cli_shows_as_a_traceback(tmp_path, monkeypatch):
    """A process prints a traceback for an exception the CLI lets through (TRACEINSPECT_DEBUG=1 lets every
    one through); the in-process run must too, or the fast run's 'no Traceback' checks would pass on a bug."""
    from traceinspect import api

    def boom(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(clirun, "IN_PROCESS", True)
    monkeypatch.setattr(api, "analyze", boom)
    trace = build_healthy().write(tmp_path / "t.pt.trace.json")
    r = clirun.run(["analyze", trace], env=dict(_env(tmp_path), TRACEINSPECT_DEBUG="1"), cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" in r.stderr and "RuntimeError: a bug" in r.stderr
    r = clirun.run(["analyze", trace], env=_env(tmp_path), cwd=tmp_path)  # without: the one-line internal error
    assert r.returncode == 5 and "Traceback" not in r.stderr and "internal error: RuntimeError" in r.stderr


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Run the tests\n\n```bash\n(.*?)\n```", readme, re.S)
    assert block, "README: no command block under '## Run the tests'"
    pytest_cmd = block.group(1).split("&&")[-1].strip().replace("python3 ", "python ")
    assert pytest_cmd.startswith("python -m pytest")
    assert pytest_cmd in (ROOT / ".ci" / "run").read_text(), f".ci/run does not run {pytest_cmd!r}"
