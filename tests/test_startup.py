"""Start-up cost: the package root is lazy, so a training process that imports traceinspect.capture,
and `traceinspect --help`, load neither pandas nor the analyzer (checked in a fresh interpreter; the
times themselves are measured in bench/startup.py, not asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numpy", "traceinspect.analyze", "traceinspect.detectors", "traceinspect.trace.model")


def _loaded_after(code: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_capture_loads_neither_pandas_nor_the_analyzer():
    loaded = _loaded_after("import traceinspect.capture")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_cli_help_loads_neither_pandas_nor_the_analyzer():
    loaded = _loaded_after(
        "import contextlib, io\nfrom traceinspect.cli import cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli(['--help'], prog_name='traceinspect')"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_cli_detectors_lists_the_catalogue_without_loading_pandas_or_a_detector():
    # issue 29: the catalogue command reads traceinspect/catalogue.py only
    loaded = _loaded_after(
        "import contextlib, io\nfrom traceinspect.cli import cli\nbuf = io.StringIO()\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(buf):\n"
        "    cli(['detectors'], prog_name='traceinspect')\n"
        "assert buf.getvalue().count('TI') >= 13, buf.getvalue()"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_catalogue_names_and_orders_every_detector_class():
    from traceinspect import catalogue
    from traceinspect.detectors import ALL

    assert [d.code for d in ALL] == [e.code for e in catalogue.CATALOGUE]
    for d, e in zip(ALL, catalogue.CATALOGUE):
        assert (d.name, d.summary, d.__module__.rsplit(".", 1)[1], d.__name__) == (e.name, e.summary, e.module, e.cls)
    assert len(catalogue.BY_KEY) == 2 * len(ALL)  # codes and names are unique


def test_the_api_module_and_its_root_names_load_nothing_heavy_until_called():
    loaded = _loaded_after(
        "import traceinspect, traceinspect.api\ntraceinspect.load, traceinspect.analyze, traceinspect.diff"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_public_names_still_resolve_and_analyze_is_the_function():
    import traceinspect
    import traceinspect.analyze  # noqa: F401  binds the submodule on the package: must not win

    assert callable(traceinspect.analyze) and traceinspect.analyze.__name__ == "analyze"
    assert traceinspect.diff.__name__ == "diff"
    for name in traceinspect.__all__:
        assert getattr(traceinspect, name) is not None
