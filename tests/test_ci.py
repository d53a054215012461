"""CI's optional suites (.ci/optional.sh, sourced by .ci/run): a failed install is a visible skip, and a
failure of a suite that .ci/expected-optional lists (it installed before) fails CI. Run with a fake pip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / ".ci"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _ci(tmp_path: Path, expected: str, script: str) -> subprocess.CompletedProcess:
    """Runs `script` after sourcing optional.sh, with a `pip` on PATH that fails for any package named
    broken-*, and EXPECTED_OPTIONAL holding `expected`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    pip = bin_dir / "pip"
    pip.write_text(
        '#!/bin/sh\nfor a in "$@"; do case "$a" in broken-*) echo "no $a" >&2; exit 1;; esac; done\n'
        'echo installed "$@"\n'
    )
    pip.chmod(0o755)
    (tmp_path / "expected").write_text(expected)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "EXPECTED_OPTIONAL": str(tmp_path / "expected"),
    }
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; . {CI / 'optional.sh'}; {script}"], capture_output=True, text=True, env=env
    )


def test_a_failed_install_of_a_new_suite_is_a_counted_skip(tmp_path):
    r = _ci(
        tmp_path,
        "# none yet\n",
        "optional torch pip install torch; optional hta pip install broken-hta; optional_summary",
    )
    assert r.returncode == 0, r.stderr
    assert "optional suite 'hta' not installed" in r.stderr
    assert "CI: 1 optional suite(s) skipped: hta" in r.stderr


def test_a_failed_install_of_an_expected_suite_fails_ci(tmp_path):
    r = _ci(
        tmp_path,
        "# installs in CI\nhta   # the cross-check\ntorch\n",
        "optional torch pip install torch; optional hta pip install broken-hta; optional_summary",
    )
    assert r.returncode == 1
    assert "CI: 0 optional suite(s) skipped" in r.stderr
    assert "FAILED: 1 optional suite(s) that installed before failed to install: hta" in r.stderr


def test_all_installed_nothing_skipped(tmp_path):
    r = _ci(tmp_path, "torch\n", "optional torch pip install torch; optional_summary")
    assert r.returncode == 0 and "CI: 0 optional suite(s) skipped\n" in r.stderr


def test_a_listed_name_must_match_a_whole_line(tmp_path):
    # "torch-extra" listed does not make "torch" expected
    r = _ci(tmp_path, "torch-extra\n", "optional torch pip install broken-torch; optional_summary")
    assert r.returncode == 0 and "skipped: torch" in r.stderr


def test_run_installs_every_expected_suite_through_optional_and_reports():
    run = (CI / "run").read_text()
    assert ". .ci/optional.sh" in run and "optional_summary || rc=1" in run
    names = {m for m in re.findall(r"^\s*optional (\S+) ", run, re.M)}
    listed = {ln.split("#")[0].strip() for ln in (CI / "expected-optional").read_text().splitlines()} - {""}
    assert listed and listed <= names, f"listed in expected-optional but never installed: {listed - names}"
