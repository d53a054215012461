"""Goldens for the rendered text and Markdown reports of a builder trace.

Refresh after an intended change with:  TRACEINSPECT_UPDATE_GOLDENS=1 python -m pytest tests/test_goldens.py
then review the diff of tests/goldens/. Output is deterministic: no absolute paths, no wall-clock times.
"""

import os
from pathlib import Path

import pytest

from builders import build_dataloader_stall, build_launch_bound
from traceinspect.analyze import analyze
from traceinspect.render import RENDERERS
from traceinspect.trace.model import load_trace

GOLDENS = Path(__file__).parent / "goldens"
UPDATE = bool(os.environ.get("TRACEINSPECT_UPDATE_GOLDENS"))


@pytest.mark.parametrize("fmt", ["text", "md"])
@pytest.mark.parametrize(
    "name,make", [("dataloader_stall", build_dataloader_stall), ("launch_bound", build_launch_bound)]
)
def test_rendered_report_matches_golden(tmp_path, fmt, name, make):
    rep = analyze(load_trace(make().write(tmp_path / f"{name}.pt.trace.json")))
    out = RENDERERS[fmt][0](rep, width=100)
    golden = GOLDENS / f"{name}.{RENDERERS[fmt][1].lstrip('.')}"
    if UPDATE or not golden.exists():
        GOLDENS.mkdir(exist_ok=True)
        golden.write_text(out)
        if not UPDATE:
            pytest.fail(f"golden {golden.name} was missing and has been written; review and commit it")
    assert out == golden.read_text(), f"{golden.name} differs; if intended, refresh with TRACEINSPECT_UPDATE_GOLDENS=1"
