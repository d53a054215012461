"""Shared fixtures: the builders, and the real-trace folder ../shared/traces when it is present."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEINSPECT_SHARED", REPO.parent / "shared")) / "traces"


def shared_available() -> bool:
    return (SHARED / "EXPECTED.json").exists()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not shared_available():
        pytest.skip("../shared/traces is not present (acceptance suite runs only where it is)")
    return SHARED


@pytest.fixture(scope="session")
def expected(shared_dir) -> dict:
    return json.loads((shared_dir / "EXPECTED.json").read_text())


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch):
    """Text reports wrap at the terminal's width (shutil.get_terminal_size: COLUMNS first). Tests read
    them at the width the CLI uses when its output is not a terminal, 100, whatever terminal (or xdist
    worker) they run in: a test of wrapped text must not pass at one width and fail at another."""
    monkeypatch.setenv("COLUMNS", "100")


# --- the fast development run and the full one (README "Tests") ------------------------------------
# `pytest -q` is the fast run: it leaves out the tests marked slow, and runs the CLI in-process
# (tests/clirun.py). `pytest -q --full` (the README's test command, what CI runs) runs everything, the
# CLI in fresh processes. Slow is what reads the real-trace set (../shared), the address-space bombs,
# the fuzzers and the browser checks: found here by what a test uses, so a new test over the shared set
# is marked without anyone remembering to. An explicit -m, or a test file or node id named on the
# command line, runs what it names.
SLOW_FILES = {"test_fuzz_load.py", "test_fuzz_reports.py", "test_differential.py"}
SLOW_DIRS = {"browser"}


def _from_shared(v) -> bool:
    try:
        return isinstance(v, (str, os.PathLike)) and SHARED.parent in Path(v).resolve().parents
    except (OSError, ValueError):
        return False


def _slow(item) -> bool:
    if {"shared_dir", "expected"} & set(getattr(item, "fixturenames", ())):
        return True
    # a test skipped where ../shared is absent reads it
    if any("shared" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
        return True
    cs = getattr(item, "callspec", None)
    if cs is not None and any(_from_shared(v) for v in cs.params.values()):
        return True
    p = Path(str(item.fspath))
    return p.name in SLOW_FILES or bool(SLOW_DIRS & set(p.parts))


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="run every test, the slow ones too, and the CLI in fresh processes (what CI runs)",
    )


def pytest_configure(config):
    import clirun

    clirun.IN_PROCESS = not config.getoption("--full")


def _names_tests(config) -> bool:
    return any("::" in a or a.endswith(".py") for a in config.args)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--full") or config.getoption("markexpr") or _names_tests(config):
        return
    keep = [i for i in items if not i.get_closest_marker("slow")]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("slow")])
        items[:] = keep
