"""docs/python-api.ipynb runs: its code cells, in order, in one namespace, from docs/ (as Jupyter would).
Executed as a script (no Jupyter kernel needed); a failing cell fails the test with the cell's source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "python-api.ipynb"


def test_notebook_is_valid_and_runs(monkeypatch):
    pytest.importorskip(
        "matplotlib", reason="the notebook draws a chart: pip install -e '.[html]' in the traceinspect checkout"
    )
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and all(c["cell_type"] in ("markdown", "code") for c in nb["cells"])
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")  # committed clean
    monkeypatch.chdir(NOTEBOOK.parent)
    ns: dict = {"__name__": "__notebook__"}
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        src = "".join(cell["source"])
        try:
            exec(compile(src, f"{NOTEBOOK.name}[code cell {i}]", "exec"), ns)
        except Exception as e:  # noqa: BLE001 - the message carries the cell
            pytest.fail(f"code cell {i} failed: {type(e).__name__}: {e}\n{src}")
    # what the notebook shows is what the API says
    assert ns["report"].findings[0].name == "dataloader-stall"
    assert list(ns["findings"]["name"]) == [f.name for f in ns["report"].findings]
    assert "dataloader-stall" in ns["d"].resolved
    import matplotlib.pyplot as plt

    plt.close("all")
